//! Mesa's Vulkan device-select layer asks Wayland for the default GPU while
//! adapters are enumerated. Where `XDG_RUNTIME_DIR` is unset (a server, CI,
//! a container), libwayland then prints "error: XDG_RUNTIME_DIR is invalid
//! or not set in the environment." for every instance, whichever backend
//! the program uses. kiln shows no window, so it gives libwayland a log
//! handler that drops that one message and prints every other one as
//! libwayland's own handler does (`vfprintf` to stderr). No environment
//! variable is set: that is unsafe while other threads may read them.

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::{CStr, c_char, c_int, c_void};
    use std::sync::Once;

    /// libwayland's `wl_log_func_t`. Its `va_list` is taken as a pointer,
    /// as the x86-64 and AArch64 ABIs pass it, and handed on unread.
    type LogHandler = unsafe extern "C" fn(*const c_char, *mut c_void);

    unsafe extern "C" {
        static stderr: *mut c_void;
        fn vfprintf(stream: *mut c_void, format: *const c_char, args: *mut c_void) -> c_int;
    }

    unsafe extern "C" fn handler(format: *const c_char, args: *mut c_void) {
        // SAFETY: libwayland passes a NUL-terminated format and its arguments.
        unsafe {
            if CStr::from_ptr(format).to_bytes().starts_with(b"error: XDG_RUNTIME_DIR") {
                log::debug!("libwayland: XDG_RUNTIME_DIR is not set (asked by Mesa's device-select layer)");
                return;
            }
            vfprintf(stderr, format, args);
        }
    }

    pub(crate) fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            // SAFETY: the symbol has libwayland's documented signature; the
            // library stays loaded (forgotten), so the handler stays set on
            // the instance the Vulkan layer uses (one per process).
            unsafe {
                let Ok(lib) = libloading::Library::new("libwayland-client.so.0") else { return };
                if let Ok(set) = lib.get::<unsafe extern "C" fn(LogHandler)>(b"wl_log_set_handler_client\0") {
                    set(handler);
                }
                std::mem::forget(lib);
            }
        });
    }
}

/// Drop libwayland's `XDG_RUNTIME_DIR` message (Linux; elsewhere nothing).
pub(crate) fn install() {
    #[cfg(target_os = "linux")]
    linux::install();
}
