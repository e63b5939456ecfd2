//! GGUF Q8_0 (type 8): blocks of 32 values, an f16 scale `d` and 32 `i8`
//! levels; the weight is `d * q`.

use crate::format::ggml::numpy::{np_cast_i64, read_f16, write_f16};
use crate::format::row::{leading_f16_scale, Format, Int8Repack, Levels, ScaleAt, QK};

pub const Q8_0: Format = Format {
    tag: "q8_0",
    name: "Q8_0",
    gguf_type: 8,
    block: QK,
    super_block: QK,
    block_bytes: 2 + QK,
    bits: 8,
    scales: &[ScaleAt::Bytes(0)],
    levels: Levels::Signed,
    dequantize,
    quantize,
    int8: Some(Int8Repack {
        layout_bits: 8,
        block_levels: bytes,
        sub_scale: leading_f16_scale,
        mins: false,
        scales_per_block: 1,
        act_group: 1,
        group_scale: false,
        int_sub_scales: None,
        nibbles: None,
        fifth: None,
    }),
};

fn bytes(block: &[u8], _sub: usize) -> [u8; QK] {
    block[2..2 + QK]
        .try_into()
        .expect("a Q8_0 block holds 32 levels")
}

fn dequantize(blk: &[u8], out: &mut [f32]) {
    let d = read_f16(blk);
    for (o, &q) in out.iter_mut().zip(&blk[2..2 + QK]) {
        *o = q as i8 as f32 * d;
    }
}

/// One block, as gguf-py's `Q8_0.quantize_blocks`.
fn quantize(x: &[f32], out: &mut Vec<u8>) {
    // np.max propagates NaN.
    let amax = x.iter().fold(0f32, |m, v| {
        if m.is_nan() || v.is_nan() {
            f32::NAN
        } else {
            m.max(v.abs())
        }
    });
    let d = amax / 127.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    write_f16(out, d);
    for &v in x {
        // gguf-py's np_roundf rounds half away from zero, exactly f32::round
        // for every f32 (its floor/fraction steps are exact).
        out.push(np_cast_i64((v * id).round()) as u8);
    }
}
