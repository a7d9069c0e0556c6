//! kiln's own transcendentals in WGSL (`exp`, `log`, `sin`, `cos`, `tanh`,
//! `pow`), built from `+ − × ÷`, `round` and bit casts only. WGSL lets
//! every driver choose its own approximation of the builtins (Mesa's `log`
//! misses by thousands of ulp near 1; SwiftShader's `cos` differs from
//! Mesa's, which made a training run's learning-rate schedule, and so its
//! whole loss curve, drift between adapters). `+ − ×` and `sqrt` are
//! correctly rounded, and so is `÷` on every adapter tested here (WGSL only
//! promises 2.5 ulp for it), so these functions give the same bits on all
//! of them, within a few ulp of the true value
//! (`tests/tests/transcendentals.rs` measures both on every adapter).
//! Subnormal results flush to zero, as GPUs usually do.

/// Which helper functions a kernel needs.
#[derive(Debug, Default, Clone, Copy)]
pub struct Needs {
    pub exp: bool,
    pub log: bool,
    pub sin_cos: bool,
    pub tanh: bool,
    pub pow: bool,
    /// `kiln_f16`: an f32 narrowed to WGSL's `f16` (kernels computing f16
    /// natively).
    pub f16: bool,
}

impl Needs {
    /// Whether any helper is needed.
    pub fn any(&self) -> bool {
        self.exp || self.log || self.sin_cos || self.tanh || self.pow || self.f16
    }

    /// Every helper either asks for.
    pub fn or(self, o: Needs) -> Needs {
        Needs {
            exp: self.exp || o.exp,
            log: self.log || o.log,
            sin_cos: self.sin_cos || o.sin_cos,
            tanh: self.tanh || o.tanh,
            pow: self.pow || o.pow,
            f16: self.f16 || o.f16,
        }
    }
}

/// The helper functions `needs` asks for, for scalar or `vec4` values
/// (`pow` is scalar only: kernels with `pow` are not vectorized).
pub fn helpers(needs: Needs, vec4: bool) -> String {
    let (f, u, i, h) =
        if vec4 { ("vec4<f32>", "vec4<u32>", "vec4<i32>", "vec4<f16>") } else { ("f32", "u32", "i32", "f16") };
    let exp = needs.exp || needs.tanh || needs.pow;
    let log = needs.log || needs.pow;
    let mut s = String::new();
    let wanted =
        [(exp, EXP_FN), (log, LOG_FN), (needs.sin_cos, SIN_COS_FN), (needs.tanh, TANH_FN), (needs.f16, F16_FN)];
    for (wanted, src) in wanted {
        if wanted {
            s += &src.replace("{F}", f).replace("{U}", u).replace("{I}", i).replace("{H}", h);
        }
    }
    if needs.pow {
        s += POW_FN;
    }
    s
}

/// e^x = 2^k · e^r with k = round(x / ln 2) and |r| ≤ ln 2 / 2. ln 2 is
/// split in two (Cody and Waite) so that k · LN2_HI is exact; e^r is
/// 1 + r + c2·r² + … + c6·r⁶ with c2..c6 fit for kiln (Lawson's iteration
/// towards the minimax relative error on |r| ≤ 0.347: 3.1e-9, 4.4e-9 with
/// the coefficients rounded to f32; 0.80 ulp worst over [−87, 88] in f32,
/// against 0.84 for the Taylor polynomial to r^7 it replaced, with two
/// fewer operations).
/// 2^k is applied by adding k · 2^23 to e^r's bits (a multiply rather than
/// `<< 23`: the same bits, as i32 products wrap, and SwiftShader splits a
/// shift by a vector into one shift per lane, 7% of its softmax; NaN is
/// found by a signed compare of the masked bits, which SSE has and its
/// unsigned twin lacks, 2% more). This is exact, and the same
/// bits as multiplying by 2^k, for every normal result, i.e. from
/// −126 · ln 2 up to 88.7228317 (e^r < 1 when k = 128, so the exponent stays
/// below the infinity code). Outside that range the selects give ∞ and 0
/// (subnormal results flush to zero) and discard whatever the arithmetic
/// made of x there, so x needs no clamp.
/// `kiln_exp_no_overflow` leaves out the overflow test, for arguments the
/// code generator knows are at most 0 (x − max x; 6–7% of softmax on
/// SwiftShader and GL): the same bits as `kiln_exp` up to 88.7228317.
const EXP_FN: &str = "fn kiln_exp_no_overflow(x: {F}) -> {F} {
    let k = round(x * {F}(1.44269504));
    let r = (x - k * {F}(0.693359375)) + k * {F}(2.12194440e-4);
    let p = {F}(1.0) + r * ({F}(1.0) + r * ({F}(0.499999940) + r * ({F}(0.166665196) + r * ({F}(0.0416683964)
        + r * ({F}(0.00836878549) + r * {F}(0.00138144556))))));
    let scaled = bitcast<{F}>(bitcast<{I}>(p) + {I}(k) * {I}(8388608));
    let y = select(scaled, {F}(0.0), x < {F}(-87.3365402));
    let is_nan = (bitcast<{I}>(x) & {I}(0x7fffffff)) > {I}(0x7f800000);
    return select(y, x, is_nan);
}
fn kiln_exp(x: {F}) -> {F} {
    return select(kiln_exp_no_overflow(x), {F}(f32_bits(0x7f800000u)), x > {F}(88.7228317));
}
";

/// log x = e · ln 2 + log m for x = m · 2^e with m in [√½, √2), and
/// log m = 2 atanh(s) = 2s (1 + s²/3 + s⁴/5 + …) with s = (m − 1) / (m + 1),
/// |s| ≤ 0.172 (truncation after s⁸/9 below 0.05 ulp). m − 1 is exact.
/// Subnormal inputs are scaled by 2^23 first. Special values are told
/// apart by their bits: NaN and every negative (−0 aside) give NaN.
const LOG_FN: &str = "fn kiln_log(x: {F}) -> {F} {
    let xb = bitcast<{U}>(x);
    let tiny = xb < {U}(0x00800000u);
    let bits = select(xb, bitcast<{U}>(x * {F}(8388608.0)), tiny);
    let mantissa = bits & {U}(0x007fffffu);
    let high = bitcast<{F}>(mantissa | {U}(0x3f800000u)) > {F}(1.41421356);
    let m = bitcast<{F}>(mantissa | select({U}(0x3f800000u), {U}(0x3f000000u), high));
    let e = {F}({I}(bits >> {U}(23u)) - select({I}(127), {I}(126), high) - select({I}(0), {I}(23), tiny));
    let f = m - {F}(1.0);
    let s = f / ({F}(2.0) + f);
    let z = s * s;
    let log_m = {F}(2.0) * s * ({F}(1.0) + z * ({F}(0.333333333) + z * ({F}(0.2) + z * ({F}(0.142857143)
        + z * {F}(0.111111111)))));
    var y = e * {F}(0.693359375) + (log_m - e * {F}(2.12194440e-4));
    y = select(y, {F}(f32_bits(0x7f800000u)), xb == {U}(0x7f800000u));
    y = select(y, {F}(f32_bits(0x7fc00000u)), xb > {U}(0x7f800000u));
    return select(y, {F}(f32_bits(0xff800000u)), (xb & {U}(0x7fffffffu)) == {U}(0u));
}
";

/// sin x for `quarter_turns` = 0, cos x for 1: x = k · π/2 + r with
/// |r| ≤ π/4 (π/2 split in three, Cody and Waite: exact for |x| < ~10^5,
/// beyond which the error grows), then sin r or cos r by their Taylor
/// polynomials picked and signed by the quadrant k + quarter_turns.
const SIN_COS_FN: &str = "fn kiln_sin_cos(x: {F}, quarter_turns: {I}) -> {F} {
    let k = round(x * {F}(0.636619772));
    let r = ((x - k * {F}(1.5703125)) - k * {F}(4.83751297e-4)) - k * {F}(7.54978995e-8);
    let z = r * r;
    let sin_r = r + r * z * ({F}(-0.166666667) + z * ({F}(0.00833333333) + z * ({F}(-0.000198412698)
        + z * {F}(2.75573192e-6))));
    let cos_r = {F}(1.0) - {F}(0.5) * z + z * z * ({F}(0.0416666667) + z * ({F}(-0.00138888889)
        + z * ({F}(2.48015873e-5) + z * {F}(-2.75573192e-7))));
    let q = {I}(k) + quarter_turns;
    let v = select(sin_r, cos_r, (q & {I}(1)) == {I}(1));
    return select(v, -v, (q & {I}(2)) == {I}(2));
}
";

/// tanh x: an odd Taylor polynomial below |x| = 0.4 (where 1 − 2/(e^2x + 1)
/// would cancel), else 1 − 2/(e^2|x| + 1) with the sign of x. |x| is
/// clamped at 15, where tanh is ±1 in f32.
const TANH_FN: &str = "fn kiln_tanh(x: {F}) -> {F} {
    let a = min(abs(x), {F}(15.0));
    let z = a * a;
    let small = a + a * z * ({F}(-0.333333333) + z * ({F}(0.133333333) + z * ({F}(-0.0539682540)
        + z * ({F}(0.0218694885) + z * ({F}(-0.00886323552) + z * {F}(0.00359212803))))));
    let large = {F}(1.0) - {F}(2.0) / (kiln_exp({F}(2.0) * a) + {F}(1.0));
    let t = select(large, small, a < {F}(0.4));
    return select(t, -t, x < {F}(0.0));
}
";

/// x rounded to the nearest f16, as `f16_bits` rounds it: WGSL leaves
/// `f16(x)` of a finite x outside f16's range indeterminate, so past the
/// largest finite f16's rounding boundary (65520) is ±inf and NaN stays
/// NaN, converted from f32's ±inf and NaN (which every API converts as
/// IEEE 754 does). Dynamic loss scaling counts on overflow reaching inf.
const F16_FN: &str = "fn kiln_f16(x: {F}) -> {H} {
    let bits = bitcast<{U}>(x) & {U}(0x7fffffffu);
    let inf = bitcast<{F}>((bitcast<{U}>(x) & {U}(0x80000000u)) | {U}(0x7f800000u));
    let special = select(inf, x, bits > {U}(0x7f800000u));
    return select({H}(clamp(x, {F}(-65504.0), {F}(65504.0))), {H}(special), bits >= {U}(0x477ff000u));
}
";

/// a^b as NumPy defines it: negative bases with integer exponents too
/// (WGSL's `pow` is undefined for them). |a|^b by repeated squaring (exact
/// steps, at most 7) for integer |b| ≤ 64, so x^2 is x·x; else
/// e^(b · log |a|).
const POW_FN: &str = "fn kiln_pow(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return 1.0; }
    let p = kiln_pow_abs(a, b);
    if (a >= 0.0) { return p; }
    if (floor(b) != b) { return f32_bits(0x7fc00000u); }
    return select(p, -p, floor(b * 0.5) * 2.0 != b);
}

fn kiln_pow_abs(a: f32, b: f32) -> f32 {
    let n = abs(b);
    if (floor(n) == n && n <= 64.0) {
        var e = u32(n);
        var base = abs(a);
        var p = 1.0;
        for (var i = 0u; i < 7u; i++) {
            if ((e & 1u) == 1u) { p = p * base; }
            base = base * base;
            e = e >> 1u;
        }
        return select(p, 1.0 / p, b < 0.0);
    }
    return kiln_exp(b * kiln_log(abs(a)));
}
";
