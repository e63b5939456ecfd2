#!/usr/bin/env python3
"""Round trip of kgen's IQ4_NL bytes through llama.cpp's gguf-py, for
runtime/tests/gguf.rs (gguf-py can dequantize IQ4_NL but not quantize it).

Usage: iq4_nl_from_bytes.py DIR

DIR/list.txt has lines "NAME K N"; DIR/NAME.bin holds N rows of kgen's IQ4_NL
blocks and DIR/NAME.x an f32 activation vector of K. Writes every tensor with
gguf.GGUFWriter (raw_dtype IQ4_NL) to DIR/kgen_iq4_nl.gguf, and for each NAME
DIR/NAME.deq (gguf-py's dequantize, f32 N x K) and DIR/NAME.y (numpy's
float32 x @ deq.T, N values; only when the weights are finite).
"""

import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T


def main():
    d = sys.argv[1]
    w = gguf.GGUFWriter(os.path.join(d, "kgen_iq4_nl.gguf"), "kgentest")
    with open(os.path.join(d, "list.txt")) as f:
        entries = [l.split() for l in f if l.strip()]
    for name, k, n in entries:
        k, n = int(k), int(n)
        raw = np.fromfile(os.path.join(d, name + ".bin"), dtype=np.uint8).reshape(n, -1)
        w.add_tensor(name, raw, raw_dtype=T.IQ4_NL)
        with np.errstate(all="ignore"):
            deq = gguf.quants.dequantize(raw, T.IQ4_NL).astype(np.float32)
        assert deq.shape == (n, k), (deq.shape, n, k)
        deq.astype("<f4").tofile(os.path.join(d, name + ".deq"))
        if np.isfinite(deq).all():
            x = np.fromfile(os.path.join(d, name + ".x"), dtype="<f4")
            (x @ deq.T).astype("<f4").tofile(os.path.join(d, name + ".y"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
