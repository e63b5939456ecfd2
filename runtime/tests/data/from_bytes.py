#!/usr/bin/env python3
"""Round trip of kgen's own encoded blocks through llama.cpp's gguf-py, for
the formats gguf-py can dequantize but not quantize (IQ4_NL, the K-quants):
runtime/tests/gguf_kernels.rs and runtime/tests/gguf_kgen_bytes.rs.

Usage: from_bytes.py DIR TYPE

TYPE is a ggml type name (IQ4_NL, Q4_K, ...). DIR/list.txt has lines
"NAME K N" or "NAME K N E"; DIR/NAME.bin holds N rows of kgen's TYPE blocks
(E times N for a stack of E experts, runtime/tests/gguf_experts.rs) and
DIR/NAME.x an f32 activation vector of K. Writes every tensor with
gguf.GGUFWriter (raw_dtype TYPE; a stack as one 3-D tensor of shape
(E, N, bytes), which GGUF stores with dims [K, N, E]) to
DIR/kgen_<type>.gguf (type in lower case), and for each NAME DIR/NAME.deq
(gguf-py's dequantize, f32 N x K, or E x N x K) and DIR/NAME.y (numpy's
float32 x @ deq.T per matrix, N values or E x N; only when the weights are
finite).
"""

import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T


def main():
    d, qtype = sys.argv[1], T[sys.argv[2]]
    w = gguf.GGUFWriter(os.path.join(d, f"kgen_{qtype.name.lower()}.gguf"), "kgentest")
    with open(os.path.join(d, "list.txt")) as f:
        entries = [l.split() for l in f if l.strip()]
    for name, *dims in entries:
        k, n = int(dims[0]), int(dims[1])
        shape = (n,) if len(dims) == 2 else (int(dims[2]), n)
        raw = np.fromfile(os.path.join(d, name + ".bin"), dtype=np.uint8).reshape(*shape, -1)
        w.add_tensor(name, raw, raw_dtype=qtype)
        with np.errstate(all="ignore"):
            deq = gguf.quants.dequantize(raw, qtype).astype(np.float32)
        assert deq.shape == (*shape, k), (deq.shape, shape, k)
        deq.astype("<f4").tofile(os.path.join(d, name + ".deq"))
        if np.isfinite(deq).all():
            x = np.fromfile(os.path.join(d, name + ".x"), dtype="<f4")
            with np.errstate(all="ignore"):
                (x @ np.swapaxes(deq, -1, -2)).astype("<f4").tofile(os.path.join(d, name + ".y"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
