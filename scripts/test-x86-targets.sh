#!/usr/bin/env bash
# A named x86 target's own kernels, run on this CPU: the runtime built with
# KGEN_TARGETS=<target>,generic-x86_64 and the int8 oracle suite run on it.
# zen3 plans Q6_K's AVX2 L1 blocks at 72 blocks (2304 values), beyond the
# 32 one fill of a GEMM's scratch of levels covers, so its GEMM runs the
# driver's multi-fill path, which the runtime's default (family) targets,
# with L1 blocks of at most 32 blocks there, never reach; its Q2_K and
# Q6_K kernels keep integer sub-scales under their own plans (other
# tiles and K blocks than the default build's). Kernels this CPU
# lacks are built and refused by dispatch, as in the default build.
#
# X86_TARGETS: targets to run (default zen3). X86_TARGET_SPECS: their
# KGEN_SPECS. Builds go to $CARGO_TARGET_DIR/x86-named, so they do not
# rebuild the default runtime in the main target directory.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=${X86_TARGETS-zen3}
specs=${X86_TARGET_SPECS:-q5_0,q5_k,q6_k,q2_k}
dir="${CARGO_TARGET_DIR:-target}/x86-named"
for target in $targets; do
    echo "== $target: KGEN_TARGETS=$target,generic-x86_64 KGEN_SPECS=$specs"
    KGEN_TARGETS="$target,generic-x86_64" KGEN_SPECS="$specs" CARGO_TARGET_DIR="$dir" \
        cargo test -q -p kgen-runtime --test int8_formats
done
