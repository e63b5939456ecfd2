//! numpy's float32 semantics, which gguf-py's quantizers and dequantizers
//! run in: what kgen's reference codecs reproduce bit for bit.

use half::f16;

#[inline]
pub(crate) fn read_f16(b: &[u8]) -> f32 {
    // The portable conversion, bit for bit F16C's (NaNs quieted alike): it
    // inlines, where `to_f32` is a call that checks the CPU every time, and
    // the repack reads a scale per column and block.
    f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32_const()
}

pub(crate) fn write_f16(out: &mut Vec<u8>, v: f32) {
    // Round to nearest even, as numpy's astype(np.float16).
    out.extend_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// numpy's float32 -> integer `astype` on x86-64 (what gguf-py runs): a
/// truncating conversion through a signed integer, so out-of-range values
/// wrap, and NaN / infinities / values beyond the 64-bit range become the
/// "integer indefinite" `i64::MIN`, whose low byte is 0. With a finite `1 / d`
/// the levels stay within a few ulps of their range, so what matters in
/// practice is the non-finite case: inf / NaN inputs, or blocks whose `d` is
/// below 2^-128 (all weights under ~2^-125), where `1 / d` overflows and the
/// products are inf or NaN. Those levels become 0 (Q4_0: clamped 0).
pub(crate) fn np_cast_i64(x: f32) -> i64 {
    if x.is_finite() && x.abs() < 9.223_372e18 {
        x as i64
    } else {
        i64::MIN
    }
}

/// Index of the first element of largest magnitude, numpy `argmax(abs(x))`
/// semantics (a NaN counts as the maximum, the first one wins).
pub(crate) fn argmax_abs(x: &[f32]) -> usize {
    let mut best = 0;
    let mut best_abs = x[0].abs();
    for (i, v) in x.iter().enumerate().skip(1) {
        if best_abs.is_nan() {
            break;
        }
        let a = v.abs();
        if a.is_nan() || a > best_abs {
            best = i;
            best_abs = a;
        }
    }
    best
}
