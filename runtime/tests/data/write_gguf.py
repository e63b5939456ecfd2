#!/usr/bin/env python3
"""Writes GGUF files with llama.cpp's gguf-py for runtime/tests/gguf.rs.

Usage: write_gguf.py --out DIR

DIR/model.gguf       (default alignment 32) and DIR/align64.gguf (alignment 64)
hold F32 / F16 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / MXFP4 / TQ1_0 / TQ2_0 matrices quantized by
gguf.quants.quantize, IQ4_NL, IQ4_XS and K-quant (Q2_K .. Q6_K) matrices of raw blocks
(gguf-py cannot quantize those: random levels and f16 scales, written with
raw_dtype and dequantized by gguf-py), plus metadata of every value type
(strings, string arrays, nested arrays) and tensors kgen must refuse (Q8_K,
IQ2_XXS, 1-D, 3-D). DIR/small.gguf is a tiny file for exhaustive truncation
tests.

For every matrix tensor NAME (numpy shape (N, K), i.e. GGUF dims [K, N]):
  NAME.orig  the f32 weights before quantization, N x K, little-endian
             (raw IQ4_NL tensors: the dequantized weights)
  NAME.q     gguf-py's encoded bytes (quantize(orig, type); IQ4_NL: the raw blocks)
  NAME.deq   gguf-py's dequantize(q, type), f32 N x K
  NAME.x     an activation vector, f32 K
  NAME.y     numpy's float32 x @ deq.T, f32 N (only for finite weights)
DIR/manifest.txt lists "file name type K N matmul|nomatmul [raw]", one per
line; "raw" marks the raw-block tensors (NAME.q is not gguf-py's quantizer's).
"""

import argparse
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

rng = np.random.default_rng(20240611)
manifest = []


def le_f32(a):
    return np.ascontiguousarray(a, dtype="<f4").tobytes()


def random_weights(n, k):
    # Row scales spread over several orders of magnitude, plus outliers.
    w = rng.standard_normal((n, k)).astype(np.float32)
    w *= (10.0 ** rng.uniform(-3, 1, size=(n, 1))).astype(np.float32)
    mask = rng.random((n, k)) < 0.02
    w[mask] *= np.float32(20.0)
    return np.ascontiguousarray(w, dtype=np.float32)


def edge_weights(k):
    """Rows of awkward blocks: zeros, ties, rounding boundaries, subnormal and
    tiny scales, f16-subnormal scales, huge values, -0.0."""
    rows = []
    nb = k // 32

    def row(blocks):
        r = np.concatenate([np.asarray(b, dtype=np.float32) for b in blocks])
        assert r.shape == (k,)
        rows.append(r)

    z = np.zeros(32, np.float32)
    rnd = lambda s=1.0: (rng.standard_normal(32) * s).astype(np.float32)
    row([z] * nb)
    # Ties of +max and -max (first wins), in both orders.
    t1 = rnd(0.1); t1[3] = 1.0; t1[9] = -1.0
    t2 = rnd(0.1); t2[3] = -1.0; t2[9] = 1.0
    row([t1, t2] + [rnd() for _ in range(nb - 2)])
    # Exact rounding boundaries: Q4_0 with d = 1 and Q8_0 with d = 1, and
    # Q5_0 with d = 1 (max -16) and d = -1 (max +16: the largest value
    # maps to level 0, -16 to 32, clamped to 31).
    b4 = np.array([-8.0] + [x + 0.5 for x in range(-8, 7)] + [x - 0.5 for x in range(-7, 9)], np.float32)
    b8 = np.array([127.0] + [x + 0.5 for x in range(-15, 16)], np.float32)
    b5 = np.array([-16.0] + [x + 0.5 for x in range(-16, 15)], np.float32)
    b5n = np.array([16.0, -16.0] + [x - 0.5 for x in range(-14, 16)], np.float32)
    row([b4, b8, b5, b5n] + [rnd() for _ in range(nb - 4)])
    # Subnormal and tiny inputs (1/d loses precision or overflows).
    row([rnd(1e-40), rnd(1e-44), rnd(1e-38), rnd(3e-39)] + [rnd(1e-39) for _ in range(nb - 4)])
    # Scales in the f16 subnormal range and just above the f16 maximum / 8.
    row([rnd(1e-6), rnd(3e-7), rnd(1e-5)] + [rnd(2e-7) for _ in range(nb - 3)])
    # -0.0 blocks and a lone value per block.
    nz = np.full(32, -0.0, np.float32)
    lone = np.zeros(32, np.float32); lone[31] = -3.0
    row([nz, lone] + [rnd() for _ in range(nb - 2)])
    # Scales near f16 rounding ties.
    row([(rnd() / np.abs(rnd()).max() * np.float32(v)).astype(np.float32)
         for v in np.linspace(1.0, 2.0, nb)])
    return np.stack(rows).astype(np.float32)


def special_weights(k):
    """Non-finite inputs: inf, NaN, and huge values whose scale overflows f16."""
    nb = k // 32
    rows = []
    for special in (np.inf, -np.inf, np.nan, 3e38, 1e6):
        r = (rng.standard_normal(k)).astype(np.float32)
        for b in range(nb):
            r[b * 32 + (b * 7) % 32] = special
        rows.append(r)
    return np.stack(rows).astype(np.float32)


def add(writer, out, fname, name, w, qtype, matmul=True):
    """Quantizes w (N, K) with gguf-py, adds it to the writer, dumps the files."""
    n, k = w.shape
    with np.errstate(all="ignore"):
        q = gguf.quants.quantize(w, qtype)
        deq = gguf.quants.dequantize(q, qtype).astype(np.float32)
    assert deq.shape == (n, k), (deq.shape, n, k)
    if qtype in (T.F32, T.F16):
        writer.add_tensor(name, q)
    else:
        writer.add_tensor(name, q, raw_dtype=qtype)
    x = rng.standard_normal(k).astype(np.float32)
    base = os.path.join(out, name)
    with open(base + ".orig", "wb") as f:
        f.write(le_f32(w))
    with open(base + ".q", "wb") as f:
        f.write(np.ascontiguousarray(q).view(np.uint8).tobytes())
    with open(base + ".deq", "wb") as f:
        f.write(le_f32(deq))
    with open(base + ".x", "wb") as f:
        f.write(le_f32(x))
    if matmul:
        y = (x @ deq.T).astype(np.float32)
        with open(base + ".y", "wb") as f:
            f.write(le_f32(y))
    manifest.append(f"{fname} {name} {qtype.name} {k} {n} {'matmul' if matmul else 'nomatmul'}")


def add_raw(writer, out, fname, name, blocks, qtype, k, matmul=True):
    """Adds raw blocks (N rows of blocks, uint8) of a type gguf-py can
    dequantize but not quantize, and dumps the files as add() does."""
    n = blocks.shape[0]
    raw = np.ascontiguousarray(blocks.reshape(n, -1), dtype=np.uint8)
    with np.errstate(all="ignore"):
        deq = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    assert deq.shape == (n, k), (deq.shape, n, k)
    writer.add_tensor(name, raw, raw_dtype=qtype)
    x = rng.standard_normal(k).astype(np.float32)
    base = os.path.join(out, name)
    for ext, data in (("orig", le_f32(deq)), ("q", raw.tobytes()), ("deq", le_f32(deq)), ("x", le_f32(x))):
        with open(base + "." + ext, "wb") as f:
            f.write(data)
    if matmul:
        with open(base + ".y", "wb") as f:
            f.write(le_f32((x @ deq.T).astype(np.float32)))
    manifest.append(f"{fname} {name} {qtype.name} {k} {n} {'matmul' if matmul else 'nomatmul'} raw")


def iq4_nl_blocks(n, k, scales=None):
    """Random IQ4_NL blocks: f16 scale d, 16 bytes of index pairs. Scales span
    several orders of magnitude with both signs unless given (N x K/32)."""
    nb = k // 32
    if scales is None:
        scales = rng.standard_normal((n, nb)) * 10.0 ** rng.uniform(-5, -1, size=(n, 1))
    d = np.asarray(scales, dtype=np.float16).reshape(n, nb, 1).view(np.uint8)
    qs = rng.integers(0, 256, size=(n, nb, 16), dtype=np.uint8)
    return np.concatenate([d, qs], axis=2)


def iq4_nl_edge_blocks(k):
    """Every index in both nibbles, zero and -0.0 scales, f16 subnormal,
    tiny and maximal scales."""
    nb = k // 32
    special = [0.0, -0.0, 6e-8, -3e-5, 65504.0, -65504.0, 1.0, -1.0]
    scales = np.array([special[i % len(special)] for i in range(4 * nb)], dtype=np.float32)
    b = iq4_nl_blocks(4, k, scales.reshape(4, nb))
    # Row 0: byte j of every block = index j | (15 - j) << 4.
    b[0, :, 2:] = (np.arange(16, dtype=np.uint8) | ((15 - np.arange(16, dtype=np.uint8)) << 4))
    return b


# Byte offsets of each K-quant's (IQ4_XS's, the lattice i-quants') f16
# super-block scales (d, and dmin where the type has one), and the largest
# |d| (an f16) whose sub-block scales d * sc stay within f16 (6-bit unsigned
# scales: 63; Q6_K's i8: 128; Q3_K's and IQ4_XS's 6-bit minus 32: 32; Q2_K's
# 4-bit: 15; IQ2's (0.5 + 15) / 4, IQ3_XXS's (0.5 + 15) / 2, IQ3_S's 31, and
# IQ1's 15 / 8, the scale kgen's kernels take). IQ1_M (offsets None) spreads
# its f16 d over the top nibbles of the four u16 scale words at byte 48.
KQUANT_SCALES = {
    T.IQ4_XS: ([0], 2047.0),
    T.Q2_K: ([80, 82], 4364.0),
    T.Q3_K: ([108], 2047.0),
    T.Q4_K: ([0, 2], 1039.0),
    T.Q5_K: ([0, 2], 1039.0),
    T.Q6_K: ([208], 511.75),
    T.IQ2_XXS: ([0], 16896.0),
    T.IQ2_XS: ([0], 16896.0),
    T.IQ2_S: ([0], 16896.0),
    T.IQ3_XXS: ([0], 8448.0),
    T.IQ3_S: ([0], 2112.0),
    T.IQ1_S: ([0], 34912.0),
    T.IQ1_M: (None, 34912.0),
}


LATTICE = (T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M)


def set_scales(qtype, b, scales):
    """Writes the f16 super-block scales (N x blocks x number of scales) into
    the blocks b (N x blocks x bytes)."""
    offsets, _ = KQUANT_SCALES[qtype]
    n, nb = b.shape[:2]
    if offsets is None:
        d = np.asarray(scales, dtype=np.float16).reshape(n, nb).view(np.uint16)
        for w in range(4):
            at = 48 + 2 * w + 1
            b[:, :, at] = (b[:, :, at] & 0x0F) | (((d >> (4 * w)) & 0x0F).astype(np.uint8) << 4)
        return
    d = np.asarray(scales, dtype=np.float16).reshape(n, nb, len(offsets)).view(np.uint8)
    for i, at in enumerate(offsets):
        b[:, :, at:at + 2] = d[:, :, 2 * i:2 * i + 2]


def scale_count(qtype):
    offsets, _ = KQUANT_SCALES[qtype]
    return 1 if offsets is None else len(offsets)


def kquant_blocks(qtype, n, k, scales=None):
    """Random K-quant (and i-quant) super-blocks: random bytes (levels, grid
    indices, signs and sub-block scales) with f16 super-block scales of both
    signs spanning several orders of magnitude, or the given ones (N x K/256
    x number of scales)."""
    nb = k // 256
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    b = rng.integers(0, 256, size=(n, nb, size), dtype=np.uint8)
    if scales is None:
        scales = rng.standard_normal((n, nb, scale_count(qtype))) * 10.0 ** rng.uniform(-6, -1, size=(n, 1, 1))
    set_scales(qtype, b, scales)
    return b


def kquant_edge_blocks(qtype, k):
    """Zero and -0.0 scales, f16 subnormal and tiny scales, the largest
    scales whose sub-block scales stay finite; row 0 has every other byte 0,
    row 1 every other byte 0xFF (IQ1_M: the scale words' low 12 bits too)."""
    _, top = KQUANT_SCALES[qtype]
    nb = k // 256
    special = [0.0, -0.0, 6e-8, -3e-5, top, -top, 1.0, -1e-3]
    if qtype in LATTICE:
        # Their sub-block scales are d (2 ls + 1) / 8 (IQ2, IQ1) or / 4
        # (IQ3_XXS), which kgen's kernels hold as f16: f16-subnormal d
        # that are multiples of 2^-21 keep them exact (2^-21 and 63 2^-21).
        special[2:4] = [2.0 ** -21, -63 * 2.0 ** -21]
    m = scale_count(qtype)
    scales = np.array([special[(i + i // m) % len(special)] for i in range(4 * nb * m)], dtype=np.float32)
    scales = scales.reshape(4, nb, m)
    b = kquant_blocks(qtype, 4, k, scales)
    b[0] = 0
    b[1] = 0xFF
    set_scales(qtype, b, scales)
    return b


def metadata(writer):
    writer.add_name("kgen test model")
    writer.add_uint32("test.u32", 123456)
    writer.add_int32("test.i32", -7)
    writer.add_uint8("test.u8", 200)
    writer.add_int8("test.i8", -100)
    writer.add_uint16("test.u16", 65000)
    writer.add_int16("test.i16", -30000)
    writer.add_uint64("test.u64", 2**40 + 5)
    writer.add_int64("test.i64", -(2**40))
    writer.add_float32("test.f32", 0.25)
    writer.add_float64("test.f64", -1.5)
    writer.add_bool("test.bool", True)
    writer.add_string("test.unicode", "żółw 🐢")
    writer.add_array("test.strings", ["a", "", "bc", "ünï", "x" * 300])
    writer.add_array("test.ints", [1, -2, 3])
    writer.add_array("test.floats", [0.5, 1.5])
    writer.add_array("test.nested", [[1, 2], [3], ["s", "t"]])
    writer.add_key_value("test.u8s", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
    writer.add_key_value("test.bools", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    writer.add_key_value("test.u64s", [1, 2**63], V.ARRAY, sub_type=V.UINT64)
    writer.add_key_value("test.f64s", [1.25, -2.0], V.ARRAY, sub_type=V.FLOAT64)


def model(out):
    fname = "model.gguf"
    w = gguf.GGUFWriter(os.path.join(out, fname), "kgentest")
    metadata(w)
    for k in (32, 64, 256):
        for n in (1, 3, 40):
            wt = random_weights(n, k)
            add(w, out, fname, f"blk.k{k}.n{n}.q4_0", wt, T.Q4_0)
            add(w, out, fname, f"blk.k{k}.n{n}.q8_0", wt, T.Q8_0)
            add(w, out, fname, f"blk.k{k}.n{n}.q5_0", wt, T.Q5_0)
            add(w, out, fname, f"blk.k{k}.n{n}.q4_1", wt, T.Q4_1)
            add(w, out, fname, f"blk.k{k}.n{n}.q5_1", wt, T.Q5_1)
            add(w, out, fname, f"blk.k{k}.n{n}.mxfp4", wt, T.MXFP4)
    # Ternary (BitNet b1.58) types, which gguf-py quantizes too.
    for k in (256, 512):
        for n in (1, 3, 40):
            wt = random_weights(n, k)
            add(w, out, fname, f"blk.k{k}.n{n}.tq1_0", wt, T.TQ1_0)
            add(w, out, fname, f"blk.k{k}.n{n}.tq2_0", wt, T.TQ2_0)
    add(w, out, fname, "f32.k64.n3", random_weights(3, 64), T.F32)
    add(w, out, fname, "f32.k7.n5", random_weights(5, 7), T.F32)
    add(w, out, fname, "f16.k64.n40", random_weights(40, 64), T.F16)
    add(w, out, fname, "f16.k9.n2", random_weights(2, 9) * np.float32(1e-3), T.F16)
    e = edge_weights(256)
    add(w, out, fname, "edge.q4_0", e, T.Q4_0)
    add(w, out, fname, "edge.q8_0", e, T.Q8_0)
    add(w, out, fname, "edge.q5_0", e, T.Q5_0)
    add(w, out, fname, "edge.q4_1", e, T.Q4_1)
    add(w, out, fname, "edge.q5_1", e, T.Q5_1)
    add(w, out, fname, "edge.mxfp4", e, T.MXFP4)
    add(w, out, fname, "edge.f16", e, T.F16)
    add(w, out, fname, "edge.tq1_0", e, T.TQ1_0)
    add(w, out, fname, "edge.tq2_0", e, T.TQ2_0)
    for k in (32, 64, 256):
        for n in (1, 3, 40):
            add_raw(w, out, fname, f"blk.k{k}.n{n}.iq4_nl", iq4_nl_blocks(n, k), T.IQ4_NL, k)
    add_raw(w, out, fname, "edge.iq4_nl", iq4_nl_edge_blocks(256), T.IQ4_NL, 256)
    for qtype in KQUANT_SCALES:
        tag = qtype.name.lower()
        for k in (256, 512):
            for n in (1, 3, 40):
                add_raw(w, out, fname, f"blk.k{k}.n{n}.{tag}", kquant_blocks(qtype, n, k), qtype, k)
        add_raw(w, out, fname, f"edge.{tag}", kquant_edge_blocks(qtype, 512), qtype, 512)
    s = special_weights(64)
    add(w, out, fname, "special.q4_0", s, T.Q4_0, matmul=False)
    add(w, out, fname, "special.q8_0", s, T.Q8_0, matmul=False)
    add(w, out, fname, "special.q5_0", s, T.Q5_0, matmul=False)
    add(w, out, fname, "special.q4_1", s, T.Q4_1, matmul=False)
    add(w, out, fname, "special.q5_1", s, T.Q5_1, matmul=False)
    # Infinite and NaN blocks come out as zeros; the 3e38 and 1e6 rows have
    # scales beyond the f16 the kernels take, which kgen refuses.
    add(w, out, fname, "special.mxfp4", s, T.MXFP4, matmul=False)
    s256 = special_weights(256)
    add(w, out, fname, "special.tq1_0", s256, T.TQ1_0, matmul=False)
    add(w, out, fname, "special.tq2_0", s256, T.TQ2_0, matmul=False)
    sp = np.array([[np.inf, 1.0], [1.0, np.nan], [-np.inf, -np.inf]], dtype=np.float32)
    add_raw(w, out, fname, "special.iq4_nl", iq4_nl_blocks(3, 64, sp), T.IQ4_NL, 64, matmul=False)
    # One non-finite super-block scale per row (inf, -inf, NaN; d or dmin).
    for qtype in KQUANT_SCALES:
        m = scale_count(qtype)
        sk = np.ones((3 * m, 2, m), dtype=np.float32) * np.float32(1e-3)
        for r in range(3 * m):
            sk[r, r % 2, r // 3] = (np.inf, -np.inf, np.nan)[r % 3]
        add_raw(w, out, fname, f"special.{qtype.name.lower()}", kquant_blocks(qtype, 3 * m, 512, sk), qtype, 512, matmul=False)
    # Tensors kgen must refuse.
    w.add_tensor("unsupported.q8_k", rng.integers(0, 256, size=(3, 292), dtype=np.uint8), raw_dtype=T.Q8_K)
    w.add_tensor("norm.weight", rng.standard_normal(64).astype(np.float32))
    w.add_tensor("cube.f32", rng.standard_normal((2, 3, 32)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def align64(out):
    fname = "align64.gguf"
    w = gguf.GGUFWriter(os.path.join(out, fname), "kgentest")
    w.add_custom_alignment(64)
    w.add_array("test.strings", ["one", "two"])
    add(w, out, fname, "a64.f32.k5.n3", random_weights(3, 5), T.F32)
    add(w, out, fname, "a64.q4_0.k64.n3", random_weights(3, 64), T.Q4_0)
    add(w, out, fname, "a64.q8_0.k32.n5", random_weights(5, 32), T.Q8_0)
    add(w, out, fname, "a64.q5_0.k160.n9", random_weights(9, 160), T.Q5_0)
    add(w, out, fname, "a64.q5_1.k96.n5", random_weights(5, 96), T.Q5_1)
    add_raw(w, out, fname, "a64.q4_k.k256.n3", kquant_blocks(T.Q4_K, 3, 256), T.Q4_K, 256)
    add_raw(w, out, fname, "a64.iq4_nl.k96.n7", iq4_nl_blocks(7, 96), T.IQ4_NL, 96)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def small(out):
    fname = "small.gguf"
    w = gguf.GGUFWriter(os.path.join(out, fname), "kgentest")
    w.add_array("test.strings", ["ab", "c"])
    w.add_array("test.nested", [[1, 2], [3]])
    w.add_float32("test.f32", 2.0)
    add(w, out, fname, "s.q4_0", random_weights(2, 32), T.Q4_0)
    add(w, out, fname, "s.f16", random_weights(2, 3), T.F16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    model(args.out)
    align64(args.out)
    small(args.out)
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    try:
        from importlib.metadata import version
        gv = version("gguf")
    except Exception:
        gv = "?"
    print(f"gguf {gv} numpy {np.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
