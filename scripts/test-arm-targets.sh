#!/usr/bin/env bash
# The named Arm targets' own generated kernels, run under qemu-user: for each
# target, the runtime is built with KGEN_TARGETS=<target>,generic-aarch64-portable
# (the portable fallback the oracle tests and dispatch expect at the end of
# every kernel list) and the oracle tests run on a qemu CPU model with the
# target's features. tests/named_target.rs (KGEN_EXPECT_TARGET) asserts that
# every registry entry came from <target> or is the portable fallback, that
# dispatch picks <target>'s kernels on that CPU, and counts the oracle runs of
# <target>'s kernels at 2, 3 and 4 bits (f32 path) and Q4_0 / Q8_0 (int8 path;
# IQ4_NL and Q5_0 kernels of the build are run and counted too),
# failing on zero; tests/kernels.rs and tests/int8.rs run the full oracle suite
# on the same build.
#
# CPU models: the exact core when qemu has it (qemu 7.2: neoverse-n1,
# cortex-a76), otherwise `max` (every feature qemu implements, including
# dotprod, i8mm, bf16, SVE and SVE2): qemu 7.2 has no neoverse-v1 / neoverse-v2
# model and no qemu has Apple cores, so those run on `max`. A target with
# `sve_vector_bits` gets that SVE vector length (`max` defaults to 512 bits):
# 256 for neoverse-v1, 128 for neoverse-v2.
#
# ARM_TARGETS: targets to run (default below; empty: none). ARM_TARGET_SPECS:
# the KGEN_SPECS of each build. Builds share the aarch64 release target
# directory with scripts/test-aarch64.sh: each one recompiles kgen-runtime and
# its tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
targets=${ARM_TARGETS-neoverse-n1 neoverse-v1 neoverse-v2 cortex-a76 apple-m1}
# 2-, 3- and 4-bit weights: small and large groups, and 3-bit whole-column
# groups (values straddle u32 words; K is ragged against every group).
specs=${ARM_TARGET_SPECS:-2:32,3:128,3:col,4:32,4:128,q4_0,q8_0,iq4_nl,q5_0}
fallback=generic-aarch64-portable
qemu_cpus=$(qemu-aarch64 -cpu help || true) # exits 1 after listing
for target in $targets; do
    [[ -f targets/$target.toml ]] || { echo "no targets/$target.toml" >&2; exit 1; }
    if grep -qxE "[[:space:]]*$target[[:space:]]*" <<<"$qemu_cpus"; then cpu=$target; else cpu=max; fi
    sve_bits=$(sed -n 's/^sve_vector_bits *= *\([0-9]*\).*/\1/p' "targets/$target.toml")
    if [[ -n $sve_bits ]]; then cpu+=",sve-default-vector-length=$((sve_bits / 8))"; fi
    echo "== $target: KGEN_TARGETS=$target,$fallback under qemu-aarch64 -cpu $cpu"
    start=$SECONDS
    KGEN_TARGETS=$target,$fallback KGEN_SPECS=$specs \
        KGEN_EXPECT_TARGET=$target KGEN_EXPECT_FALLBACK=$fallback \
        CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu -L /usr/aarch64-linux-gnu" \
        cargo test -p kgen-runtime --release --target aarch64-unknown-linux-gnu \
        --test named_target --test kernels --test int8 -- --show-output
    echo "== $target: passed in $((SECONDS - start)) s"
done
