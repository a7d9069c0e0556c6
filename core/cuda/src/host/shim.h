// kiln: CUDA's execution model on the host, so that the CUDA C++ kiln
// renders runs here, unchanged, for the executed checks. Each block's
// threads are fibers on one OS thread, run in turn until each ends or
// waits at a barrier: __syncthreads for the block, a shuffle or
// __syncwarp for its warp of 32. A barrier opens when every thread of its
// group that has not ended waits at it. Blocks are shared among OS threads,
// one per core, each running its blocks one after another on the same
// fibers. A fiber starts on its own stack through ucontext and
// switches with _setjmp/_longjmp, which, unlike swapcontext, make no
// system call (the signal mask never changes here).
#include <algorithm>
#include <csetjmp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <ucontext.h>
#include <vector>

#define __device__
#define __global__
#define __launch_bounds__(n)
#define __shared__ thread_local

struct dim3 {
    unsigned x, y, z;
};
thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace kiln_host {

enum class State { Ready, Block, Warp, Done };

struct Fiber {
    ucontext_t start;
    jmp_buf context;
    bool started;
    State state;
    dim3 index;
    unsigned lane, warp;
    unsigned shuffles;  // this thread's shuffles so far (picks the slot buffer)
};

struct Block {
    jmp_buf scheduler;
    std::vector<Fiber> fibers;
    std::vector<char> stacks;
    // Two slot buffers per warp, used in turn, so that a fast lane's next
    // shuffle cannot overwrite a value a slow lane has yet to read.
    std::vector<uint64_t> slots;
    Fiber* current;
    void (*kernel)(const void*);
    const void* globals;
};

thread_local Block* block;

constexpr size_t STACK = 64 * 1024;

// Back to the scheduler, in state `s`; returns when resumed.
inline void wait(State s) {
    Fiber* f = block->current;
    f->state = s;
    if (!_setjmp(f->context)) _longjmp(block->scheduler, 1);
}

// A fiber's life: the kernel, once for each block of the launch.
inline void entry() {
    for (;;) {
        block->kernel(block->globals);
        wait(State::Done);
    }
}

inline void resume(Fiber& f) {
    block->current = &f;
    threadIdx = f.index;
    if (_setjmp(block->scheduler)) return;
    if (f.started) _longjmp(f.context, 1);
    f.started = true;
    setcontext(&f.start);
}

// Opens the barriers every waiting thread of a group reached; false when
// none opens (a deadlock: some thread waits at a barrier others skip).
inline bool open_barriers() {
    bool opened = false;
    bool all_block = true, any_block = false;
    for (auto& f : block->fibers) {
        if (f.state == State::Done) continue;
        all_block = all_block && f.state == State::Block;
        any_block = any_block || f.state == State::Block;
    }
    if (all_block && any_block) {
        for (auto& f : block->fibers)
            if (f.state == State::Block) f.state = State::Ready;
        return true;
    }
    size_t warps = (block->fibers.size() + 31) / 32;
    for (size_t w = 0; w < warps; w++) {
        bool all = true, any = false;
        for (size_t i = w * 32; i < block->fibers.size() && i < w * 32 + 32; i++) {
            State s = block->fibers[i].state;
            if (s == State::Done) continue;
            all = all && s == State::Warp;
            any = any || s == State::Warp;
        }
        if (all && any) {
            for (size_t i = w * 32; i < block->fibers.size() && i < w * 32 + 32; i++)
                if (block->fibers[i].state == State::Warp) block->fibers[i].state = State::Ready;
            opened = true;
        }
    }
    return opened;
}

// Runs one block to its end; false on a deadlock.
inline bool run_block() {
    for (;;) {
        bool ran = false, left = false;
        for (auto& f : block->fibers) {
            if (f.state == State::Ready) {
                resume(f);
                ran = true;
            }
            left = left || f.state != State::Done;
        }
        if (!left) return true;
        if (!open_barriers() && !ran) return false;
    }
}

// Lane `src`'s value of this shuffle (its own where `src` is out of range).
template <class T>
inline T exchange(T v, int src) {
    static_assert(sizeof(T) <= 8, "a shuffle of a scalar");
    Fiber* f = block->current;
    size_t buffer = f->shuffles++ & 1;
    uint64_t* slots = &block->slots[(f->warp * 2 + buffer) * 32];
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    slots[f->lane] = bits;
    wait(State::Warp);
    size_t lanes = block->fibers.size() - f->warp * 32;
    if (src < 0 || (size_t)src >= 32 || (size_t)src >= lanes) return v;
    T r;
    memcpy(&r, &slots[src], sizeof(T));
    return r;
}

}  // namespace kiln_host

inline void __syncthreads() { kiln_host::wait(kiln_host::State::Block); }
inline void __syncwarp() { kiln_host::wait(kiln_host::State::Warp); }
inline void __threadfence_block() {}
template <class T> inline T __shfl_sync(unsigned, T v, int lane) { return kiln_host::exchange(v, lane & 31); }
template <class T> inline T __shfl_xor_sync(unsigned, T v, int mask) {
    return kiln_host::exchange(v, (int)(kiln_host::block->current->lane ^ (unsigned)mask));
}
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned d) {
    return kiln_host::exchange(v, (int)(kiln_host::block->current->lane + d));
}
template <class T> inline T __shfl_up_sync(unsigned, T v, unsigned d) {
    return kiln_host::exchange(v, (int)kiln_host::block->current->lane - (int)d);
}
inline bool __all_sync(unsigned, bool p) {
    for (int src = 0; src < 32; src++) p = kiln_host::exchange(p, src) && p;
    return p;
}
inline bool __any_sync(unsigned, bool p) {
    for (int src = 0; src < 32; src++) p = kiln_host::exchange(p, src) || p;
    return p;
}
inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(unsigned x) { return x == 0 ? 32 : __builtin_clz(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

// Runs the blocks `first`, `first + step`, ... of a launch on this OS
// thread, its threads as fibers where the kernel synchronizes (else each to
// its end in turn); false on a deadlock.
inline bool kiln_host_blocks(void (*kernel)(const void*), const void* globals, const unsigned* grid,
                             const unsigned* size, int fibers, size_t first, size_t step) {
    kiln_host::Block b;
    size_t threads = (size_t)size[0] * size[1] * size[2];
    b.fibers.resize(threads);
    if (fibers) b.stacks.resize(threads * kiln_host::STACK);
    b.slots.assign((threads + 31) / 32 * 64, 0);
    b.kernel = kernel;
    b.globals = globals;
    kiln_host::block = &b;
    for (size_t t = 0; t < (fibers ? threads : 0); t++) {
        kiln_host::Fiber& f = b.fibers[t];
        f.index = dim3{(unsigned)(t % size[0]), (unsigned)(t / size[0] % size[1]), (unsigned)(t / size[0] / size[1])};
        f.lane = (unsigned)(t % 32);
        f.warp = (unsigned)(t / 32);
        f.started = false;
        getcontext(&f.start);
        f.start.uc_stack.ss_sp = &b.stacks[t * kiln_host::STACK];
        f.start.uc_stack.ss_size = kiln_host::STACK;
        f.start.uc_link = nullptr;
        makecontext(&f.start, kiln_host::entry, 0);
    }
    blockDim = dim3{size[0], size[1], size[2]};
    gridDim = dim3{grid[0], grid[1], grid[2]};
    size_t blocks = (size_t)grid[0] * grid[1] * grid[2];
    for (size_t i = first; i < blocks; i += step) {
        blockIdx = dim3{(unsigned)(i % grid[0]), (unsigned)(i / grid[0] % grid[1]), (unsigned)(i / grid[0] / grid[1])};
        if (!fibers) {
            for (size_t t = 0; t < threads; t++) {
                threadIdx = dim3{(unsigned)(t % size[0]), (unsigned)(t / size[0] % size[1]), (unsigned)(t / size[0] / size[1])};
                kernel(globals);
            }
            continue;
        }
        for (size_t t = 0; t < threads; t++) {
            kiln_host::Fiber& f = b.fibers[t];
            f.state = kiln_host::State::Ready;
            f.shuffles = 0;
        }
        if (!kiln_host::run_block()) return false;
    }
    return true;
}

// Runs `kernel` over the grid, its blocks shared among the machine's cores
// (blocks are independent, as on a GPU; each OS thread has its own shared
// memory and fibers); 0 when done, 1 on a deadlock.
inline int kiln_host_run(void (*kernel)(const void*), const void* globals, const unsigned* grid, const unsigned* size,
                         int fibers) {
    size_t blocks = (size_t)grid[0] * grid[1] * grid[2];
    size_t workers = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), blocks);
    if (workers <= 1) return kiln_host_blocks(kernel, globals, grid, size, fibers, 0, 1) ? 0 : 1;
    std::vector<std::thread> pool;
    std::vector<char> done(workers, 0);
    for (size_t w = 0; w < workers; w++)
        pool.emplace_back([&, w] { done[w] = kiln_host_blocks(kernel, globals, grid, size, fibers, w, workers); });
    for (auto& t : pool) t.join();
    for (char d : done)
        if (!d) return 1;
    return 0;
}
