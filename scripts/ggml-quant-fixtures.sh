#!/usr/bin/env bash
# Writes generator/tests/data/ggml/: f32 rows (x.f32) and ggml's own
# quantization of them (ggml.iq4_xs, ggml.iq4_nl), which
# generator/tests/ggml_quantizers.rs holds kgen's quantizers to byte for
# byte. ggml comes from benches/llamacpp's build (llama-cpp-python 0.3.36's
# sdist; its quantizers live in ggml-base, built without -march flags, so
# no FMA contraction changes their rounding). Run it again only to extend
# the fixture; CI reads the committed files.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=generator/tests/data/ggml
LCP_BUILD="${LCP_BUILD:-/tmp/lcp-build}"
SRC="${LCP_DIR:-/tmp/lcp}/llama_cpp_python-${LCP_VERSION:-0.3.36}/vendor/llama.cpp/ggml"
[ -f "$LCP_BUILD/ggml/src/libggml-base.a" ] || bash benches/llamacpp/run.sh --build-only
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -I"$SRC/include" benches/llamacpp/quantize_chunk.c \
    "$LCP_BUILD/ggml/src/libggml-cpu.a" "$LCP_BUILD/ggml/src/libggml-base.a" \
    -lm -lpthread -lstdc++ -fopenmp -o "$work/quantize_chunk"
mkdir -p "$OUT"
python3 - "$OUT/x.f32" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(20261128)
rows = []
# Gaussian super-blocks, each at its own scale, 2% outliers at 20 sigma.
for _ in range(6):
    v = rng.standard_normal(256) * 10.0 ** rng.uniform(-3, 1)
    v[rng.random(256) < 0.02] *= 20
    rows.append(v)
# One-signed; one sub-block 1e5 times the rest; a lone value; constant.
rows.append(np.abs(rng.standard_normal(256)))
v = rng.standard_normal(256) * 1e-3
v[:32] *= 1e5
rows.append(v)
v = np.zeros(256)
v[77] = -5.0
rows.append(v)
rows.append(np.full(256, 3.0))
# All zero; f32-subnormal; values whose squared sums overflow (NaN scales).
rows.append(np.zeros(256))
rows.append(rng.standard_normal(256) * 1e-40)
rows.append(rng.standard_normal(256) * 1e13)
# 32 values on which `127 / max` and ggml's `1 / (max / 127)` pick other
# indices (found in review), among smaller neighbours.
rep = np.frombuffer(bytes.fromhex(
    "fbc82dbf9782c5be1e044c3e45620c3fc11d5d3fac4a1e3f5aade03ec883073f"
    "e17128beb619313fafcfcc3f4c7828bf5dba443f6b51d73f9254703f7ea4b83e"
    "e357753ea7d542bef3f5f2bf9199aa3fef2acbbf3b0919beb733ac3e9abb1040"
    "36789d3ecbef21bfe67b893f043ac63fdb970f3f27e916be7a9646bccf2ec9bf"), dtype="<f4")
v = rng.standard_normal(256) * 0.1
v[64:96] = rep
rows.append(v)
x = np.array(rows, dtype="<f4")
assert np.all(np.isfinite(x))
x.tofile(sys.argv[1])
PY
rows=$(( $(stat -c %s "$OUT/x.f32") / 1024 ))
"$work/quantize_chunk" "$OUT/x.f32" "$OUT/ggml.iq4_xs" "$rows" 256 23
"$work/quantize_chunk" "$OUT/x.f32" "$OUT/ggml.iq4_nl" "$rows" 256 20
ls -l "$OUT"
