//! GGUF IQ4_NL (type 20): blocks of 32 values, an f16 scale `d` and 16
//! bytes of 4-bit indices in Q4_0's nibble order; the weight is
//! `d * VALUES[index]`, a non-linear int8 codebook.
//!
//! gguf-py has no IQ4_NL quantizer; kgen's follows ggml's search for the
//! block scale, and its output is checked by dequantizing it with gguf-py.

use crate::format::ggml::numpy::{read_f16, write_f16};
use crate::format::ggml::q4_0::nibbles;
use crate::format::row::{leading_f16_scale, Format, Int8Repack, Levels, NibbleStore, ScaleAt, QK};

/// IQ4_NL's codebook (ggml's `kvalues_iq4nl`): the int8 level of each 4-bit
/// index, before the block scale.
pub const VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

pub const IQ4_NL: Format = Format {
    tag: "iq4_nl",
    name: "IQ4_NL",
    gguf_type: 20,
    block: QK,
    super_block: QK,
    block_bytes: 2 + QK / 2,
    bits: 4,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Codebook(&VALUES),
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 4,
        block_levels: nibbles,
        sub_scale: leading_f16_scale,
        mins: false,
        scales_per_block: 1,
        act_group: 1,
        group_scale: false,
        int_sub_scales: None,
        nibbles: Some(NibbleStore::Q4_0Order { at: 2 }),
        fifth: None,
    }),
};

fn dequantize(blk: &[u8], out: &mut [f32]) {
    let d = read_f16(blk);
    let v = |i: u8| VALUES[i as usize] as f32;
    for (b, &byte) in blk[2..2 + QK / 2].iter().enumerate() {
        out[b] = d * v(byte & 0x0f);
        out[b + QK / 2] = d * v(byte >> 4);
    }
}

/// Index of the codebook value nearest to `v` (ties to the larger value, as
/// ggml's `best_index_int8`); NaN gives 15, as there (every comparison with
/// it is false, which leaves the top index).
pub(crate) fn nearest(v: f32) -> u8 {
    let vals = &VALUES;
    if v <= vals[0] as f32 {
        return 0;
    }
    // First value >= v; v lies between it and its predecessor.
    let hi = vals.iter().position(|&c| c as f32 >= v).unwrap_or(15);
    if hi == 0 || vals[hi] as f32 <= v {
        return hi as u8;
    }
    let (a, b) = (vals[hi - 1] as f32, vals[hi] as f32);
    if v - a < b - v {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}

/// Trials of IQ4_NL's scale search either side of mapping the largest
/// magnitude onto the codebook's -127 end (ggml uses 7 without an importance
/// matrix).
const IQ4_NL_TRIES: i32 = 7;

/// One IQ4_NL block: the scale of [`fit_scale`], stored as f16, and the
/// nearest codebook values for that scale (f32) as indices.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    let mut idx = [8u8; QK]; // value 1 * d = 0 for an all-zero block
    let mut d = 0f32;
    if let Some(fit) = fit_scale(x) {
        d = fit;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (l, &v) in idx.iter_mut().zip(x) {
            *l = nearest(id * v);
        }
    }
    write_f16(out, d);
    for b in 0..QK / 2 {
        out.push(idx[b] | (idx[b + QK / 2] << 4));
    }
}

/// The scale of 32 values on the codebook minimizing the squared error
/// weighted by `v^2`, searched as ggml's `quantize_iq4_nl` does without an
/// importance matrix (IQ4_NL's blocks, IQ4_XS's sub-blocks): a
/// least-squares fit after mapping the largest magnitude onto `+127`, then
/// after mapping it onto each of `-127 - 7 ..= -127 + 7`. `None` when every
/// magnitude is below 1e-15 (NaN counts as none).
pub(crate) fn fit_scale(x: &[f32]) -> Option<f32> {
    // First value of largest magnitude (NaN never wins, as in ggml).
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < 1e-15 {
        return None;
    }
    // Weighted least squares for the indices `id` picks: (d, d * sum q x w).
    let fit = |id: f32| -> (f32, f32, f32) {
        let (mut sqx, mut sq2) = (0f32, 0f32);
        for &v in x {
            let q = VALUES[nearest(id * v) as usize] as f32;
            let w = v * v;
            sqx += w * q * v;
            sq2 += w * q * q;
        }
        (sqx, sq2, if sq2 > 0.0 { sqx / sq2 } else { 0.0 })
    };
    // ggml's first trial divides twice (`d = max / 127`, then `1 / d`);
    // `127 / max` rounds once and picks other indices now and then.
    let (sqx, _, mut d) = fit(1.0 / (max / 127.0));
    let mut best = d * sqx;
    for t in -IQ4_NL_TRIES..=IQ4_NL_TRIES {
        let (sqx, sq2, dt) = fit((t as f32 - 127.0) / max);
        if sq2 > 0.0 && sqx * sqx > best * sq2 {
            d = dt;
            best = d * sqx;
        }
    }
    Some(d)
}
