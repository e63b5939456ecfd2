#!/usr/bin/env bash
# Peer benchmark: llama.cpp (ggml CPU backend) mul_mat on Q4_0 / Q8_0 / Q5_0 /
# IQ4_NL weights, plain and repacked.
# Fetches the llama.cpp source vendored in the llama-cpp-python sdist (PyPI),
# builds ggml-base + ggml-cpu only (Release, GGML_NATIVE=ON or LCP_ISA=avx2's
# flags below, no OpenMP),
# compiles bench_mul_mat.cpp (and bench_moe.cpp) against them and runs it. Idempotent: each step is
# skipped or incremental when its output is already there. Needs cmake
# (`pip install cmake` if the system has none) and g++.
#
#   bash benches/llamacpp/run.sh                 # all Q4_0 cases
#   bash benches/llamacpp/run.sh --type q4_0,iq4_nl --threads 1   # extra args go to the bench
#   bash benches/llamacpp/run.sh --moe --threads 1,2   # bench_moe.cpp: ggml_mul_mat_id on a MoE FFN
#   bash benches/llamacpp/run.sh --build-only    # build, print the bench's path, run nothing
#                                                # (bench_moe sits beside it)
#
# Environment: LCP_VERSION (0.3.36), LCP_DIR (/tmp/lcp), LCP_ISA (native; avx2
# builds ggml with GGML_NATIVE=OFF, i.e. SSE4.2/AVX/AVX2/FMA/F16C/BMI2 and no
# AVX-512, and the bench with -march=haswell: llama.cpp's AVX2 paths on a
# machine that has more), LCP_BUILD (/tmp/lcp-build, or /tmp/lcp-build-avx2),
# JOBS (2), LLAMAFILE (OFF; ON routes the non-repacked Q4_0 path through
# llamafile's tinyBLAS, as llama.cpp's own default build does; use a separate
# LCP_BUILD for it), VERIFY (0; 1 = first show with perf which kernels run).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LCP_VERSION="${LCP_VERSION:-0.3.36}"
LCP_DIR="${LCP_DIR:-/tmp/lcp}"
LCP_ISA="${LCP_ISA:-native}"
case "$LCP_ISA" in
    native)
        NATIVE=ON; MARCH=native; ISA_FLAGS=(); LCP_BUILD="${LCP_BUILD:-/tmp/lcp-build}"
        CACHE_NEEDS=("GGML_NATIVE:[A-Z]*=ON") ;;
    avx2)
        NATIVE=OFF; MARCH=haswell; LCP_BUILD="${LCP_BUILD:-/tmp/lcp-build-avx2}"
        # Named, not left to ggml's defaults: those turn every x86 extension
        # off when SOURCE_DATE_EPOCH is set or when cross-compiling.
        ISA_FLAGS=(-DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
            -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF)
        CACHE_NEEDS=("GGML_NATIVE:[A-Z]*=OFF" "GGML_AVX2:[A-Z]*=ON") ;;
    *) echo "run.sh: LCP_ISA must be native or avx2, not $LCP_ISA" >&2; exit 2 ;;
esac
JOBS="${JOBS:-2}"
LLAMAFILE="${LLAMAFILE:-OFF}"

SRC="$LCP_DIR/llama_cpp_python-$LCP_VERSION/vendor/llama.cpp/ggml"
BUILD_ONLY=0
if [ "${1:-}" = --build-only ]; then
    BUILD_ONLY=1
    shift
fi
command -v cmake > /dev/null || { echo "run.sh: cmake not found (pip install cmake)" >&2; exit 1; }

# 1. source
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    mkdir -p "$LCP_DIR"
    TARBALL="$LCP_DIR/llama_cpp_python-$LCP_VERSION.tar.gz"
    if [ ! -f "$TARBALL" ]; then
        echo "== downloading llama-cpp-python==$LCP_VERSION sdist into $LCP_DIR" >&2
        # --no-binary for this package only: with :all:, pip would also build
        # the sdist's build requirements (cmake, ninja) from source to read
        # its metadata, which takes many minutes.
        python3 -m pip download "llama-cpp-python==$LCP_VERSION" --no-deps \
            --no-binary llama-cpp-python -d "$LCP_DIR" >&2
    fi
    echo "== extracting $TARBALL" >&2
    tar -xzf "$TARBALL" -C "$LCP_DIR"
fi

# 2. configure. The sdist's ggml/ lacks ggml.pc.in, which a standalone ggml
# configure needs, so a two-line wrapper project pulls ggml in as a subdirectory
# (ggml only: not llama, common or tools).
WRAP="$LCP_DIR/ggml-only"
mkdir -p "$WRAP"
cat > "$WRAP/CMakeLists.txt.new" <<CML
cmake_minimum_required(VERSION 3.14)
project(ggml_only C CXX)
add_subdirectory("$SRC" ggml)
CML
if cmp -s "$WRAP/CMakeLists.txt.new" "$WRAP/CMakeLists.txt"; then
    rm -f "$WRAP/CMakeLists.txt.new"
else
    mv "$WRAP/CMakeLists.txt.new" "$WRAP/CMakeLists.txt"
fi
# A build directory configured for the other ISA would run the wrong kernels.
for need in "${CACHE_NEEDS[@]}"; do
    if [ -f "$LCP_BUILD/CMakeCache.txt" ] && ! grep -qx "$need" "$LCP_BUILD/CMakeCache.txt"; then
        echo "run.sh: $LCP_BUILD was configured without ${need/:\[A-Z\]\*=/=}, which LCP_ISA=$LCP_ISA" \
            "needs; use another LCP_BUILD" >&2
        exit 2
    fi
done
if [ ! -f "$LCP_BUILD/CMakeCache.txt" ]; then
    echo "== configuring ggml in $LCP_BUILD" >&2
    cmake -S "$WRAP" -B "$LCP_BUILD" \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE="$NATIVE" "${ISA_FLAGS[@]}" \
        -DGGML_CPU=ON \
        -DGGML_CPU_REPACK=ON \
        -DGGML_LLAMAFILE="$LLAMAFILE" \
        -DGGML_OPENMP=OFF \
        -DGGML_BLAS=OFF \
        -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_RPC=OFF \
        -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >&2
fi

# 3. build only the two libraries we link
echo "== building ggml-base ggml-cpu (-j$JOBS)" >&2
cmake --build "$LCP_BUILD" --target ggml-base ggml-cpu -j"$JOBS" >&2

LIB_BASE="$(find "$LCP_BUILD" -name libggml-base.a | head -n1)"
LIB_CPU="$(find "$LCP_BUILD" -name libggml-cpu.a | head -n1)"

# 4. the bench programs: bench_mul_mat and, beside it, the mixture-of-experts
# bench (ggml_mul_mat_id)
build_bench() { # NAME: compiles $HERE/NAME.cpp to $LCP_BUILD/NAME when stale
    local bin="$LCP_BUILD/$1" src="$HERE/$1.cpp"
    if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ] || [ "$HERE/bench_common.h" -nt "$bin" ] ||
        [ "$LIB_CPU" -nt "$bin" ] || [ "$LIB_BASE" -nt "$bin" ]; then
        echo "== compiling $bin" >&2
        g++ -std=c++17 -O2 -march="$MARCH" -I"$SRC/include" "$src" -o "$bin" \
            "$LIB_CPU" "$LIB_BASE" -lpthread -lm
    fi
}
build_bench bench_mul_mat
build_bench bench_moe
BIN="$LCP_BUILD/bench_mul_mat"
BIN_MOE="$LCP_BUILD/bench_moe"

if [ "$BUILD_ONLY" = 1 ]; then
    echo "$BIN"
    exit 0
fi

# 5. optional: show with perf which kernels actually run (VERIFY=1)
if [ "${VERIFY:-0}" = 1 ]; then
    for mode in plain repack; do
        DATA="$LCP_BUILD/perf-$mode.data"
        perf record -q -F 2000 -o "$DATA" -- "$BIN" --modes "$mode" --shapes 4096x4096 \
            --m 1,32 --threads 1 --min-time 0.3 --no-check > /dev/null 2>&1
        echo "== perf: top symbols, mode=$mode (gemm_..._lut_avx<block_iq4_nlx8> is a" \
             "GCC ICF alias of the <block<4, 8>> = block_q4_0x8 instance: same address)" >&2
        perf report -i "$DATA" --stdio --sort symbol 2> /dev/null \
            | awk '!/^#/ && NF { sub(/[ -]+$/, ""); if (++n <= 5) print }' >&2
    done
fi

# 6. run (--moe: the mixture-of-experts bench with the remaining arguments)
if [ "${1:-}" = --moe ]; then
    shift
    BIN="$BIN_MOE"
fi
echo "== running $BIN $*" >&2
"$BIN" "$@"
