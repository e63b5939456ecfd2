#!/usr/bin/env python3
"""Writes GPTQ layers to a .safetensors file for kgen-runtime's loader tests.

    write_gptq.py --out FILE [--meta KEY=VALUE]... --layer SPEC [--layer SPEC]...

SPEC is space-separated KEY=VALUE pairs:
    prefix=NAME      tensor name prefix (required)
    bits=2|3|4|8     (default 4)
    group=G|-1       group size, -1 = one group per column (default 128)
    k=K n=N          matrix shape, K and N multiples of 32 (defaults 256, 64)
    seed=S           random seed (default 0)
    zeros=v1|v2      v1: AutoGPTQ stores z - 1; v2: stores z (default v1)
    zero0=1          v1 only: let the quantizer's zero point be 0, which
                     AutoGPTQ packs as (uint32)(0 - 1) without masking (it
                     spills into the higher fields of the word); the expected
                     weights then follow AutoGPTQ's dequantization,
                     z = (field & mask) + 1, read back from the packed words
    act_order=1      random desc_act permutation and its g_idx
    g_idx=1          write the trivial g_idx (i // group) even without act-order
    scales=f16|f32|bf16                   (default f16)
  Fault injection for error tests:
    qweight_dtype=f32      store qweight as float32
    drop=NAME              leave out {prefix}.NAME
    qzeros_extra_cols=C    append C columns to qzeros
    qweight_drop_rows=R    drop the last R rows of qweight
    bad_gidx=range|count|len   g_idx out of range / unbalanced / wrong length
    nan_scale=1            one scale is NaN

Next to each layer it stores {prefix}.expected_w, float32 [K, N], the
dequantized weights in the ORIGINAL row order:
    w[i, j] = scales[g_idx[i], j] * (q[i, j] - z[g_idx[i], j])
with the scales as stored (rounded to the file's dtype).

qweight and qzeros are packed the way AutoGPTQ's QuantLinear.pack does it
(qweight along K, qzeros along N; 2/4/8-bit 32//bits fields per word, 3-bit
32 values in three words).
"""

import argparse
import json
import struct
import sys

import numpy as np
from safetensors.numpy import save


def pack_rows(vals, bits):
    """AutoGPTQ's packing loop: packs uint32 `vals` [R, C] along axis 0 into
    [R // 32 * bits, C] uint32 words. Fields are not masked (as in AutoGPTQ)."""
    vals = vals.astype(np.uint32)
    rows_out = vals.shape[0] // 32 * bits
    out = np.zeros((rows_out, vals.shape[1]), dtype=np.uint32)
    i = 0
    row = 0
    while row < rows_out:
        if bits in (2, 4, 8):
            per = 32 // bits
            for j in range(i, i + per):
                out[row] |= vals[j] << np.uint32(bits * (j - i))
            i += per
            row += 1
        elif bits == 3:
            for j in range(i, i + 10):
                out[row] |= vals[j] << np.uint32(3 * (j - i))
            i += 10
            out[row] |= vals[i] << np.uint32(30)
            row += 1
            out[row] |= (vals[i] >> np.uint32(2)) & np.uint32(1)
            i += 1
            for j in range(i, i + 10):
                out[row] |= vals[j] << np.uint32(3 * (j - i) + 1)
            i += 10
            out[row] |= vals[i] << np.uint32(31)
            row += 1
            out[row] |= (vals[i] >> np.uint32(1)) & np.uint32(3)
            i += 1
            for j in range(i, i + 10):
                out[row] |= vals[j] << np.uint32(3 * (j - i) + 2)
            i += 10
            row += 1
        else:
            raise SystemExit(f"bits {bits} not supported")
    return out


def unpack_cols(words, bits, n):
    """Reads n `bits`-wide fields per row from LSB-first packed words [G, C]
    (AutoGPTQ's 3-bit layout is the same 96-bit little-endian stream)."""
    mask = (1 << bits) - 1
    out = np.zeros((words.shape[0], n), dtype=np.int64)
    for j in range(n):
        bit = j * bits
        w, s = bit // 32, bit % 32
        v = words[:, w].astype(np.uint64) >> np.uint64(s)
        if s + bits > 32:
            v |= words[:, w + 1].astype(np.uint64) << np.uint64(32 - s)
        out[:, j] = (v & np.uint64(mask)).astype(np.int64)
    return out


def to_bf16_bits(x):
    """float32 -> bfloat16 bit patterns (round to nearest even)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return rounded.astype(np.uint16)


def bf16_bits_to_f32(h):
    return (h.astype(np.uint32) << np.uint32(16)).view(np.float32)


def parse_spec(text):
    spec = {}
    for item in text.split():
        if "=" not in item:
            raise SystemExit(f"layer spec item {item!r} is not KEY=VALUE")
        key, value = item.split("=", 1)
        spec[key] = value
    if "prefix" not in spec:
        raise SystemExit("layer spec needs prefix=NAME")
    return spec


def make_layer(spec, tensors, retype):
    prefix = spec["prefix"]
    bits = int(spec.get("bits", 4))
    k = int(spec.get("k", 256))
    n = int(spec.get("n", 64))
    group = int(spec.get("group", 128))
    seed = int(spec.get("seed", 0))
    zeros_conv = spec.get("zeros", "v1")
    zero0 = spec.get("zero0", "0") == "1"
    act_order = spec.get("act_order", "0") == "1"
    scales_dtype = spec.get("scales", "f16")
    if k % 32 or n % 32:
        raise SystemExit("K and N must be multiples of 32 (AutoGPTQ packing)")
    g = k if group == -1 else group
    groups = -(-k // g)
    maxq = (1 << bits) - 1
    rng = np.random.default_rng(seed)

    q = rng.integers(0, maxq + 1, size=(k, n), dtype=np.int64)
    if zeros_conv == "v1":
        # Faithfully representable by AutoGPTQ: stored z - 1 in 0..=maxq.
        # zero0: the quantizer's own range 0..=maxq instead.
        lo = 0 if zero0 else 1
        z = rng.integers(lo, maxq + 1 + lo, size=(groups, n), dtype=np.int64)
        if zero0:
            z[0, 0] = 0  # at least one spill
    elif zeros_conv == "v2":
        z = rng.integers(0, maxq + 1, size=(groups, n), dtype=np.int64)
    else:
        raise SystemExit(f"zeros={zeros_conv!r}: expected v1 or v2")
    scales32 = (0.002 + 0.05 * rng.random(size=(groups, n))).astype(np.float32)
    if spec.get("nan_scale", "0") == "1":
        scales32[groups - 1, n // 2] = np.nan

    if act_order:
        perm = rng.permutation(k)  # processing order, as GPTQ's desc_act
        invperm = np.argsort(perm)
        g_idx = (invperm // g).astype(np.int32)
    else:
        g_idx = (np.arange(k) // g).astype(np.int32)

    # Packing, AutoGPTQ style.
    qweight = pack_rows(q.astype(np.uint32), bits)
    stored_z = z - 1 if zeros_conv == "v1" else z
    # AutoGPTQ: zeros.numpy().astype(np.uint32) after `zeros -= 1` (wraps -1).
    stored_u32 = (stored_z.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)
    qzeros = pack_rows(np.ascontiguousarray(stored_u32.T), bits).T

    # Scales as stored.
    if scales_dtype == "f16":
        scales_store = scales32.astype(np.float16)
        scales_eff = scales_store.astype(np.float64)
    elif scales_dtype == "f32":
        scales_store = scales32
        scales_eff = scales_store.astype(np.float64)
    elif scales_dtype == "bf16":
        scales_store = to_bf16_bits(scales32)
        scales_eff = bf16_bits_to_f32(scales_store).astype(np.float64)
        retype[f"{prefix}.scales"] = "BF16"
    else:
        raise SystemExit(f"scales={scales_dtype!r}: expected f16, f32 or bf16")

    # Expected weights in original row order.
    if zero0:
        # What AutoGPTQ's dequantization makes of the (spilled) packed zeros.
        z_eff = unpack_cols(qzeros, bits, n) + 1
    else:
        z_eff = z
    expected = scales_eff[g_idx, :] * (q - z_eff[g_idx, :]).astype(np.float64)

    # Fault injection.
    qweight_i32 = qweight.view(np.int32)
    drop_rows = int(spec.get("qweight_drop_rows", 0))
    if drop_rows:
        qweight_i32 = qweight_i32[: qweight_i32.shape[0] - drop_rows]
    if spec.get("qweight_dtype") == "f32":
        qweight_out = qweight_i32.astype(np.float32)
    else:
        qweight_out = qweight_i32
    qzeros_i32 = np.ascontiguousarray(qzeros).view(np.int32)
    extra = int(spec.get("qzeros_extra_cols", 0))
    if extra:
        qzeros_i32 = np.concatenate([qzeros_i32, np.zeros((groups, extra), dtype=np.int32)], axis=1)
    bad = spec.get("bad_gidx")
    g_idx_out = g_idx.copy()
    if bad == "range":
        g_idx_out[k // 2] = groups
    elif bad == "count":
        # Move one row to another group: unbalanced (and not trivial).
        g_idx_out[0] = (g_idx_out[0] + 1) % groups
    elif bad == "len":
        g_idx_out = g_idx_out[:-1]
    elif bad is not None:
        raise SystemExit(f"bad_gidx={bad!r}: expected range, count or len")

    out = {
        f"{prefix}.qweight": qweight_out,
        f"{prefix}.qzeros": qzeros_i32,
        f"{prefix}.scales": scales_store,
        f"{prefix}.expected_w": expected.astype(np.float32),
    }
    if act_order or bad is not None or spec.get("g_idx", "0") == "1":
        out[f"{prefix}.g_idx"] = g_idx_out
    drop = spec.get("drop")
    if drop is not None:
        del out[f"{prefix}.{drop}"]
    for name, arr in out.items():
        if name in tensors:
            raise SystemExit(f"tensor {name} written twice")
        tensors[name] = np.ascontiguousarray(arr)


def retype_header(blob, retype):
    """Changes the dtype string of some tensors in a serialized file (numpy has
    no bfloat16, so bf16 scales are written as U16 and relabelled)."""
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    for name, dtype in retype.items():
        header[name]["dtype"] = dtype
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + blob[8 + n :]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", action="append", default=[], help="KEY=VALUE file metadata")
    ap.add_argument("--layer", action="append", default=[], help="layer spec")
    args = ap.parse_args()
    if not args.layer:
        raise SystemExit("at least one --layer is needed")
    tensors = {}
    retype = {}
    for text in args.layer:
        make_layer(parse_spec(text), tensors, retype)
    meta = {}
    for kv in args.meta:
        key, _, value = kv.partition("=")
        meta[key] = value
    blob = save(tensors, metadata=meta or None)
    if retype:
        blob = retype_header(blob, retype)
    with open(args.out, "wb") as f:
        f.write(blob)


if __name__ == "__main__":
    sys.exit(main())
