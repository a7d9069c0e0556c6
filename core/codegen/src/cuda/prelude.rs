//! What every CUDA kernel kiln renders includes: WGSL's value types and
//! builtins as small C++ templates, so that the writer prints naga's IR
//! nearly as it stands. Vectors are `vec<T, N>`, aligned to their size,
//! so a `vec<float, 4>` load is one 128-bit load (`ld.global.v4.f32`).

/// The prelude's source.
pub const PRELUDE: &str = r#"// kiln: WGSL's types and builtins for CUDA C++.
// A kernel's entry point, a C symbol (`batch` renames each one).
#define KILN_ENTRY extern "C" __global__
typedef unsigned int u32;
typedef int i32;
typedef float f32;

template <class T, int N> struct alignas(sizeof(T) * (N == 3 ? 4 : N)) vec {
    T c[N];
    __device__ T& operator[](u32 i) { return c[i]; }
    __device__ const T& operator[](u32 i) const { return c[i]; }
};
template <class T, int N> struct arr {
    T c[N];
    __device__ T& operator[](u32 i) { return c[i]; }
    __device__ const T& operator[](u32 i) const { return c[i]; }
};

template <class T, int N> __device__ inline vec<T, N> splat(T v) {
    vec<T, N> r;
    for (int i = 0; i < N; i++) r.c[i] = v;
    return r;
}

// Componentwise operators; operands may differ in type. Bitwise operators
// on bools give bools, as in WGSL (C++ promotes them to int).
template <class A, class B, class R> struct k_result { typedef R type; };
template <class R> struct k_result<bool, bool, R> { typedef bool type; };
#define KILN_BINARY(OP)                                                                        \
    template <class A, class B, int N> __device__ inline auto operator OP(vec<A, N> a, vec<B, N> b) { \
        vec<typename k_result<A, B, decltype(a.c[0] OP b.c[0])>::type, N> r;                 \
        for (int i = 0; i < N; i++) r.c[i] = a.c[i] OP b.c[i];                                 \
        return r;                                                                              \
    }                                                                                          \
    template <class A, class B, int N> __device__ inline auto operator OP(vec<A, N> a, B b) {  \
        vec<typename k_result<A, B, decltype(a.c[0] OP b)>::type, N> r;                      \
        for (int i = 0; i < N; i++) r.c[i] = a.c[i] OP b;                                      \
        return r;                                                                              \
    }                                                                                          \
    template <class A, class B, int N> __device__ inline auto operator OP(A a, vec<B, N> b) {  \
        vec<typename k_result<A, B, decltype(a OP b.c[0])>::type, N> r;                      \
        for (int i = 0; i < N; i++) r.c[i] = a OP b.c[i];                                      \
        return r;                                                                              \
    }
KILN_BINARY(+) KILN_BINARY(-) KILN_BINARY(*) KILN_BINARY(/) KILN_BINARY(%)
KILN_BINARY(&) KILN_BINARY(|) KILN_BINARY(^)
KILN_BINARY(==) KILN_BINARY(!=) KILN_BINARY(<) KILN_BINARY(<=) KILN_BINARY(>) KILN_BINARY(>=)
KILN_BINARY(&&) KILN_BINARY(||)
#undef KILN_BINARY

// Shifts take the amount modulo 32, as WGSL does (C++ leaves 32 and more undefined).
template <class A> __device__ inline A k_shl(A a, u32 b) { return a << (b & 31u); }
template <class A> __device__ inline A k_shr(A a, u32 b) { return a >> (b & 31u); }
template <class A, int N> __device__ inline vec<A, N> k_shl(vec<A, N> a, vec<u32, N> b) {
    for (int i = 0; i < N; i++) a.c[i] = a.c[i] << (b.c[i] & 31u);
    return a;
}
template <class A, int N> __device__ inline vec<A, N> k_shr(vec<A, N> a, vec<u32, N> b) {
    for (int i = 0; i < N; i++) a.c[i] = a.c[i] >> (b.c[i] & 31u);
    return a;
}

#define KILN_UNARY(NAME, OP)                                                  \
    template <class T, int N> __device__ inline auto NAME(vec<T, N> a) {     \
        vec<decltype(OP a.c[0]), N> r;                                        \
        for (int i = 0; i < N; i++) r.c[i] = OP a.c[i];                       \
        return r;                                                             \
    }                                                                         \
    template <class T> __device__ inline auto NAME(T a) { return OP a; }
KILN_UNARY(neg, -) KILN_UNARY(logical_not, !) KILN_UNARY(bit_not, ~)
#undef KILN_UNARY

// Elementwise over vectors, from a scalar definition.
#define KILN_MAP1(NAME)                                                       \
    template <class T, int N> __device__ inline auto NAME(vec<T, N> a) {     \
        vec<decltype(NAME(a.c[0])), N> r;                                     \
        for (int i = 0; i < N; i++) r.c[i] = NAME(a.c[i]);                    \
        return r;                                                             \
    }
#define KILN_MAP2(NAME)                                                       \
    template <class T, int N> __device__ inline auto NAME(vec<T, N> a, vec<T, N> b) { \
        vec<decltype(NAME(a.c[0], b.c[0])), N> r;                             \
        for (int i = 0; i < N; i++) r.c[i] = NAME(a.c[i], b.c[i]);            \
        return r;                                                             \
    }
#define KILN_MAP3(NAME)                                                       \
    template <class T, int N> __device__ inline auto NAME(vec<T, N> a, vec<T, N> b, vec<T, N> c) { \
        vec<decltype(NAME(a.c[0], b.c[0], c.c[0])), N> r;                     \
        for (int i = 0; i < N; i++) r.c[i] = NAME(a.c[i], b.c[i], c.c[i]);    \
        return r;                                                             \
    }

__device__ inline f32 k_abs(f32 x) { return fabsf(x); }
__device__ inline i32 k_abs(i32 x) { return x < 0 ? -x : x; }
__device__ inline u32 k_abs(u32 x) { return x; }
__device__ inline f32 k_min(f32 a, f32 b) { return fminf(a, b); }
__device__ inline i32 k_min(i32 a, i32 b) { return a < b ? a : b; }
__device__ inline u32 k_min(u32 a, u32 b) { return a < b ? a : b; }
__device__ inline f32 k_max(f32 a, f32 b) { return fmaxf(a, b); }
__device__ inline i32 k_max(i32 a, i32 b) { return a > b ? a : b; }
__device__ inline u32 k_max(u32 a, u32 b) { return a > b ? a : b; }
template <class T> __device__ inline T k_clamp(T x, T lo, T hi) { return k_min(k_max(x, lo), hi); }
__device__ inline f32 k_fma(f32 a, f32 b, f32 c) { return fmaf(a, b, c); }
__device__ inline f32 k_sqrt(f32 x) { return sqrtf(x); }
__device__ inline f32 k_inverse_sqrt(f32 x) { return rsqrtf(x); }
__device__ inline f32 k_floor(f32 x) { return floorf(x); }
__device__ inline f32 k_ceil(f32 x) { return ceilf(x); }
__device__ inline f32 k_trunc(f32 x) { return truncf(x); }
// WGSL rounds halfway cases to even.
__device__ inline f32 k_round(f32 x) { return rintf(x); }
__device__ inline f32 k_fract(f32 x) { return x - floorf(x); }
__device__ inline f32 k_exp(f32 x) { return expf(x); }
__device__ inline f32 k_exp2(f32 x) { return exp2f(x); }
__device__ inline f32 k_log(f32 x) { return logf(x); }
__device__ inline f32 k_log2(f32 x) { return log2f(x); }
__device__ inline f32 k_pow(f32 a, f32 b) { return powf(a, b); }
__device__ inline f32 k_sin(f32 x) { return sinf(x); }
__device__ inline f32 k_cos(f32 x) { return cosf(x); }
__device__ inline f32 k_tan(f32 x) { return tanf(x); }
__device__ inline f32 k_tanh(f32 x) { return tanhf(x); }
__device__ inline f32 k_atan2(f32 a, f32 b) { return atan2f(a, b); }
__device__ inline f32 k_sign(f32 x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }
__device__ inline i32 k_sign(i32 x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }
__device__ inline f32 k_ldexp(f32 x, i32 e) { return ldexpf(x, e); }
__device__ inline u32 k_count_one_bits(u32 x) { return __popc(x); }
__device__ inline i32 k_count_one_bits(i32 x) { return __popc(x); }
__device__ inline u32 k_first_leading_bit(u32 x) { return x == 0u ? 0xffffffffu : 31u - __clz(x); }
__device__ inline bool k_is_nan(f32 x) { return x != x; }
__device__ inline bool k_is_inf(f32 x) { return fabsf(x) == __int_as_float(0x7f800000); }
KILN_MAP1(k_abs) KILN_MAP2(k_min) KILN_MAP2(k_max) KILN_MAP3(k_clamp) KILN_MAP3(k_fma)
KILN_MAP1(k_sqrt) KILN_MAP1(k_inverse_sqrt) KILN_MAP1(k_floor) KILN_MAP1(k_ceil) KILN_MAP1(k_trunc)
KILN_MAP1(k_round) KILN_MAP1(k_fract) KILN_MAP1(k_exp) KILN_MAP1(k_exp2) KILN_MAP1(k_log) KILN_MAP1(k_log2)
KILN_MAP2(k_pow) KILN_MAP1(k_sin) KILN_MAP1(k_cos) KILN_MAP1(k_tan) KILN_MAP1(k_tanh) KILN_MAP2(k_atan2)
KILN_MAP1(k_sign) KILN_MAP1(k_count_one_bits) KILN_MAP1(k_first_leading_bit) KILN_MAP1(k_is_nan) KILN_MAP1(k_is_inf)

template <class T> __device__ inline T k_select(T reject, T accept, bool c) { return c ? accept : reject; }
template <class T, int N> __device__ inline vec<T, N> k_select(vec<T, N> reject, vec<T, N> accept, vec<bool, N> c) {
    vec<T, N> r;
    for (int i = 0; i < N; i++) r.c[i] = c.c[i] ? accept.c[i] : reject.c[i];
    return r;
}
template <class T, int N> __device__ inline vec<T, N> k_select(vec<T, N> reject, vec<T, N> accept, bool c) {
    return c ? accept : reject;
}
template <int N> __device__ inline bool k_all(vec<bool, N> v) {
    for (int i = 0; i < N; i++) if (!v.c[i]) return false;
    return true;
}
template <int N> __device__ inline bool k_any(vec<bool, N> v) {
    for (int i = 0; i < N; i++) if (v.c[i]) return true;
    return false;
}
__device__ inline bool k_all(bool v) { return v; }
__device__ inline bool k_any(bool v) { return v; }
template <class T, int N> __device__ inline T k_dot(vec<T, N> a, vec<T, N> b) {
    T r = a.c[0] * b.c[0];
    for (int i = 1; i < N; i++) r = r + a.c[i] * b.c[i];
    return r;
}

// Value conversions and bit casts, scalar and per component.
template <class T, class S> __device__ inline T convert(S s) { return (T)s; }
template <class T, class S, int N> __device__ inline vec<T, N> convert(vec<S, N> s) {
    vec<T, N> r;
    for (int i = 0; i < N; i++) r.c[i] = (T)s.c[i];
    return r;
}
template <class T, class S> __device__ inline T bitcast(S s) {
    static_assert(sizeof(T) == sizeof(S), "bitcast between sizes");
    T t;
    memcpy(&t, &s, sizeof(T));
    return t;
}
template <class T, class S, int N> __device__ inline vec<T, N> bitcast(vec<S, N> s) {
    vec<T, N> r;
    for (int i = 0; i < N; i++) r.c[i] = bitcast<T>(s.c[i]);
    return r;
}

// One f16 (its bits) to f32 and back, rounding to nearest even: PTX's
// conversions on the GPU; the host build of the executed checks has
// its compiler's _Float16.
#if defined(__CUDACC__)
__device__ inline f32 k_f16_to_f32(unsigned short h) {
    f32 f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ inline unsigned short k_f32_to_f16(f32 f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#else
inline f32 k_f16_to_f32(unsigned short h) { return (f32)bitcast<_Float16>(h); }
inline unsigned short k_f32_to_f16(f32 f) { return bitcast<unsigned short>((_Float16)f); }
#endif

// f16 pairs in a u32, as WGSL's pack2x16float and unpack2x16float.
__device__ inline vec<f32, 2> k_unpack2x16float(u32 w) {
    return vec<f32, 2>{{k_f16_to_f32((unsigned short)(w & 0xffffu)), k_f16_to_f32((unsigned short)(w >> 16))}};
}
__device__ inline u32 k_pack2x16float(vec<f32, 2> v) {
    return (u32)k_f32_to_f16(v.c[0]) | ((u32)k_f32_to_f16(v.c[1]) << 16);
}

// WGSL's dot4I8Packed: the words' four signed bytes multiplied pairwise
// and summed; one dp4a instruction on the GPU.
#if defined(__CUDACC__)
__device__ inline i32 k_dot4_i8_packed(u32 a, u32 b) { return __dp4a((int)a, (int)b, 0); }
#else
inline i32 k_dot4_i8_packed(u32 a, u32 b) {
    i32 s = 0;
    for (int i = 0; i < 4; i++) s += (i32)(signed char)(a >> (8 * i)) * (i32)(signed char)(b >> (8 * i));
    return s;
}
#endif

// Subgroups are warps: every lane of the warp takes part. Vectors
// shuffle per component.
#define KILN_SHUFFLE(NAME, SHFL)                                                              \
    template <class T> __device__ inline T NAME(T v, u32 x) { return SHFL(0xffffffffu, v, x); } \
    template <class T, int N> __device__ inline vec<T, N> NAME(vec<T, N> v, u32 x) {         \
        for (int i = 0; i < N; i++) v.c[i] = SHFL(0xffffffffu, v.c[i], x);                    \
        return v;                                                                             \
    }
KILN_SHUFFLE(k_shuffle_xor, __shfl_xor_sync) KILN_SHUFFLE(k_shuffle, __shfl_sync)
KILN_SHUFFLE(k_shuffle_down, __shfl_down_sync) KILN_SHUFFLE(k_shuffle_up, __shfl_up_sync)
#undef KILN_SHUFFLE
__device__ inline bool k_subgroup_all(bool p) { return __all_sync(0xffffffffu, p); }
__device__ inline bool k_subgroup_any(bool p) { return __any_sync(0xffffffffu, p); }
template <class T> __device__ inline T k_subgroup_add(T v) {
    for (u32 m = 16u; m > 0u; m >>= 1) v = v + k_shuffle_xor(v, m);
    return v;
}
template <class T> __device__ inline T k_subgroup_min(T v) {
    for (u32 m = 16u; m > 0u; m >>= 1) v = k_min(v, k_shuffle_xor(v, m));
    return v;
}
template <class T> __device__ inline T k_subgroup_max(T v) {
    for (u32 m = 16u; m > 0u; m >>= 1) v = k_max(v, k_shuffle_xor(v, m));
    return v;
}
template <class T> __device__ inline T k_subgroup_mul(T v) {
    for (u32 m = 16u; m > 0u; m >>= 1) v = v * k_shuffle_xor(v, m);
    return v;
}
"#;
