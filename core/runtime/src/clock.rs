//! Seconds on a monotonic clock, natively and in the browser: `Instant`
//! natively; on the web, where `Instant` is unavailable, the page's or
//! worker's `performance.now()`.

/// Seconds since an arbitrary fixed point.
#[cfg(not(target_arch = "wasm32"))]
pub fn now() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64()
}

/// Seconds since an arbitrary fixed point.
#[cfg(target_arch = "wasm32")]
pub fn now() -> f64 {
    use js_sys::{Function, Reflect};
    let performance = Reflect::get(&js_sys::global(), &"performance".into()).ok();
    let ms = performance.and_then(|p| {
        let now = Function::from(Reflect::get(&p, &"now".into()).ok()?);
        now.call0(&p).ok()?.as_f64()
    });
    ms.unwrap_or_else(js_sys::Date::now) / 1e3
}
