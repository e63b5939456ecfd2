// kgen template: int8-activation family, portable Rust.
//
// The same primitives as the SIMD templates on fixed-size arrays (8
// columns); LLVM vectorises them for whatever the build targets.

/// f32 vector (8 columns).
pub type F = [f32; 8];
/// 8 lanes of 4 bytes each (one lane per column), held as u32.
pub type I = [u32; 8];

#[inline(always)]
pub unsafe fn zero_f() -> F {
    [0.0; 8]
}

#[inline(always)]
pub unsafe fn zero_i() -> I {
    [0; 8]
}

#[inline(always)]
pub unsafe fn loadf(p: *const f32) -> F {
    core::ptr::read_unaligned(p as *const F)
}

#[inline(always)]
pub unsafe fn storef(p: *mut f32, v: F) {
    core::ptr::write_unaligned(p as *mut F, v)
}

#[inline(always)]
pub unsafe fn splatf(p: *const f32) -> F {
    [*p; 8]
}

/// Multiply then add, unfused: the portable path must not depend on an FMA unit.
#[inline(always)]
pub unsafe fn fmaf(a: F, b: F, c: F) -> F {
    let mut r = c;
    for i in 0..8 {
        r[i] += a[i] * b[i];
    }
    r
}

#[inline(always)]
pub unsafe fn mulf(a: F, b: F) -> F {
    let mut r = a;
    for i in 0..8 {
        r[i] *= b[i];
    }
    r
}

#[inline(always)]
pub unsafe fn loadb(p: *const u8) -> I {
    core::ptr::read_unaligned(p as *const I)
}

#[inline(always)]
pub unsafe fn nib_lo(w: I) -> I {
    w.map(|v| v & 0x0F0F_0F0F)
}

#[inline(always)]
pub unsafe fn nib_hi(w: I) -> I {
    w.map(|v| (v >> 4) & 0x0F0F_0F0F)
}

/// 2-bit layouts: the levels in bits `S..S + 2` of each byte (`S` = 0, 2,
/// 4, 6), as unsigned bytes.
#[inline(always)]
pub unsafe fn crumb<const S: i32>(w: I) -> I {
    w.map(|v| (v >> S) & 0x0303_0303)
}

#[inline(always)]
pub unsafe fn bcast4(p: *const i8) -> I {
    [(p as *const u32).read_unaligned(); 8]
}

/// acc + per-lane sum of 4 products of unsigned `w` and signed `x` bytes.
#[inline(always)]
pub unsafe fn dot_u(acc: I, w: I, x: I) -> I {
    let mut r = acc;
    for i in 0..8 {
        let (wb, xb) = (w[i].to_le_bytes(), x[i].to_le_bytes());
        let mut s = 0i32;
        for j in 0..4 {
            s += wb[j] as i32 * xb[j] as i8 as i32;
        }
        r[i] = (r[i] as i32).wrapping_add(s) as u32;
    }
    r
}

/// Block accumulator += 4-byte products of unsigned `w` and signed `x` (i32).
#[inline(always)]
pub unsafe fn pair_acc(acc: I, w: I, x: I) -> I {
    dot_u(acc, w, x)
}

/// The accumulator already holds i32 lane sums.
#[inline(always)]
pub unsafe fn block_sum(acc: I) -> I {
    acc
}

/// acc + per-lane sum of 4 products of signed bytes.
#[inline(always)]
pub unsafe fn dot_s(acc: I, w: I, x: I) -> I {
    let mut r = acc;
    for i in 0..8 {
        let (wb, xb) = (w[i].to_le_bytes(), x[i].to_le_bytes());
        let mut s = 0i32;
        for j in 0..4 {
            s += wb[j] as i8 as i32 * xb[j] as i8 as i32;
        }
        r[i] = (r[i] as i32).wrapping_add(s) as u32;
    }
    r
}

#[inline(always)]
pub unsafe fn splati(p: *const i32) -> I {
    [*p as u32; 8]
}

#[inline(always)]
pub unsafe fn subi(a: I, b: I) -> I {
    let mut r = a;
    for i in 0..8 {
        r[i] = (a[i] as i32).wrapping_sub(b[i] as i32) as u32;
    }
    r
}

/// a + b per i32 lane: a group's integer sums (formats with one weight
/// scale per group; kept only in those kernels).
#[inline(always)]
pub unsafe fn addi(a: I, b: I) -> I {
    let mut r = a;
    for i in 0..8 {
        r[i] = (a[i] as i32).wrapping_add(b[i] as i32) as u32;
    }
    r
}

#[inline(always)]
pub unsafe fn cvti(a: I) -> F {
    a.map(|v| v as i32 as f32)
}

/// IEEE binary16 bits to f32, exactly (normals, subnormals, zero, inf, NaN).
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1F) as u32;
    let man = (h & 0x3FF) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: value m * 2^-24, exact in f32.
            let v = m as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        (31, m) => sign | 0x7F80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

#[inline(always)]
pub unsafe fn scales(p: *const u16) -> F {
    let mut r = [0f32; 8];
    for i in 0..8 {
        r[i] = f16_to_f32(p.add(i).read_unaligned());
    }
    r
}

/// Codebook of the codebook formats (IQ4_NL): the int8 level of each 4-bit
/// index. The emitter replaces it with the format's own table and keeps it
/// and `lut` only in codebook kernels (`idx_lo` / `idx_hi` also in grid ones).
pub const CODEBOOK: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Low-nibble codebook indices.
#[inline(always)]
pub unsafe fn idx_lo(w: I) -> I {
    nib_lo(w)
}

/// High-nibble codebook indices.
#[inline(always)]
pub unsafe fn idx_hi(w: I) -> I {
    nib_hi(w)
}

/// Codebook levels of each index byte (0..16), as i8 bytes.
#[inline(always)]
pub unsafe fn lut(idx: I) -> I {
    idx.map(|v| u32::from_le_bytes(v.to_le_bytes().map(|b| CODEBOOK[(b & 15) as usize] as u8)))
}

/// Grid formats (kgen's `k2_*` and `k1`, paper 004): `GRID[C][n]` is the
/// unsigned level of index field `C` of nibble `n` (bits `2C..2C + 2` for
/// 2-bit indices, as in this default table; bit `C` for 1-bit ones, four
/// tables), so one shuffle per field turns nibble indices into levels. The
/// emitter replaces the table with the format's and keeps it, `idx_lo` /
/// `idx_hi` and `grid_lut` only in grid kernels.
pub const GRID: [[i8; 16]; 2] = [
    [0, 1, 3, 4, 0, 1, 3, 4, 0, 1, 3, 4, 0, 1, 3, 4],
    [0, 0, 0, 0, 1, 1, 1, 1, 3, 3, 3, 3, 4, 4, 4, 4],
];

/// Levels of index field `C` of 32 nibble indices (0..16): per byte
/// (the table load is loop-invariant).
#[inline(always)]
pub unsafe fn grid_lut<const C: usize>(idx: I) -> I {
    idx.map(|v| u32::from_le_bytes(v.to_le_bytes().map(|b| GRID[C][(b & 15) as usize] as u8)))
}

// 5-bit formats (Q5_0): the emitter keeps these only in 5-bit kernels. A
// weight chunk `w` holds the low 4 bits of 4 values per column as the 4-bit
// layout does; `h` (the column group's plane) holds their fifth bits: byte
// `j` bit `G` for chunk `G`'s low nibble, bit `4 + G` for its high one (see
// `kgen::layout::int8`). Word shifts move bits across bytes only outside
// the masks.

/// Unsigned 5-bit levels (0..32) of chunk `G`'s low nibbles.
#[inline(always)]
pub unsafe fn hb_lo<const G: i32>(w: I, h: I) -> I {
    let mut r = w;
    for i in 0..8 {
        r[i] = (w[i] & 0x0F0F_0F0F) | (((h[i] >> G) << 4) & 0x1010_1010);
    }
    r
}

/// Unsigned 5-bit levels of chunk `G`'s high nibbles.
#[inline(always)]
pub unsafe fn hb_hi<const G: i32>(w: I, h: I) -> I {
    let mut r = w;
    for i in 0..8 {
        r[i] = ((w[i] >> 4) & 0x0F0F_0F0F) | ((h[i] >> G) & 0x1010_1010);
    }
    r
}

/// acc + per-lane sums of 4 products of unsigned `a` and signed `x` and of
/// `b` and `y`.
#[inline(always)]
pub unsafe fn dot2_u(acc: I, a: I, x: I, b: I, y: I) -> I {
    dot_u(dot_u(acc, a, x), b, y)
}

// 3-bit layouts (Q3_K, the IQ1 / IQ2 codebook indices): a stored chunk
// holds two 3-bit levels per byte, in bits 0..3 and 4..7, and one bit of
// the fourth chunk's two in bits 3 and 7 (see `kgen::layout::int8`).

/// The levels in bits 0..3 of each byte.
#[inline(always)]
pub unsafe fn lo3(w: I) -> I {
    w.map(|v| v & 0x0707_0707)
}

/// The levels in bits 4..7 of each byte.
#[inline(always)]
pub unsafe fn hi3(w: I) -> I {
    w.map(|v| (v >> 4) & 0x0707_0707)
}

/// The fourth chunk from the bits 3 and 7 of stored chunks `a`, `b`, `c`
/// (bit 0, 1, 2 of each level), as a chunk [`lo3`] and [`hi3`] read.
#[inline(always)]
pub unsafe fn spill3(a: I, b: I, c: I) -> I {
    let mut r = a;
    for i in 0..8 {
        r[i] = ((a[i] >> 3) & 0x1111_1111)
            | ((b[i] >> 2) & 0x2222_2222)
            | ((c[i] >> 1) & 0x4444_4444);
    }
    r
}

// 6-bit formats (Q6_K): the emitter keeps these only in 6-bit kernels. A
// stored chunk holds 6-bit levels in bits 0..6 of each byte and one bit
// pair of a spill chunk in bits 6..8 (see `kgen::layout::int8`).

/// Unsigned 6-bit levels (0..64) of a stored chunk.
#[inline(always)]
pub unsafe fn lo6(w: I) -> I {
    w.map(|v| v & 0x3F3F_3F3F)
}

/// Unsigned 6-bit levels of the spill chunk carried by stored chunks `a`,
/// `b`, `c`: `(a >> 6) | (b >> 6) << 2 | (c >> 6) << 4` per byte.
#[inline(always)]
pub unsafe fn spill6(a: I, b: I, c: I) -> I {
    let mut r = a;
    for i in 0..8 {
        r[i] = ((a[i] >> 6) & 0x0303_0303)
            | ((b[i] >> 4) & 0x0C0C_0C0C)
            | ((c[i] >> 2) & 0x3030_3030);
    }
    r
}
