#!/usr/bin/env bash
# The int8 kernels on aarch64 with SVE, cross-compiled and run under
# qemu-user: once with 256-bit SVE (`-cpu max,sve256=on`), where dispatch
# must pick the sve256 kernels (below i8mm) and they must match the oracle
# and the 128-bit sdot kernels bit for bit; once with 128-bit SVE
# (`-cpu max,sve128=on`), where it must skip them (forcing them is an
# error) and fall back without SIGILL or wrong results. QEMU_SVE_CPUS
# overrides the list of qemu CPU settings. The fallback kernels are the ones
# `-cpu max` runs in full in scripts/test-aarch64.sh, so with 128-bit SVE the
# int8 suites run their KGEN_FORCE_ISA tests only (every format on every ISA
# the CPU runs, checked against the oracle); QEMU_FULL=1 runs them in full.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
tests=(--test aarch64_neon --test aarch64_sve --test model)
int8_tests=(--test int8 --test int8_formats)
cpus=${QEMU_SVE_CPUS:-max,sve256=on max,sve128=on}
for cpu in $cpus; do
    echo "== qemu-aarch64 -cpu $cpu"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu -L /usr/aarch64-linux-gnu"
    cargo test -p kgen-runtime --release --target aarch64-unknown-linux-gnu "${tests[@]}" \
        -- --nocapture
    if [[ $cpu == *sve128* && ${QEMU_FULL:-} != 1 ]]; then
        cargo test -p kgen-runtime --release --target aarch64-unknown-linux-gnu "${int8_tests[@]}" \
            -- --nocapture force_isa_selects_each_isa
    else
        cargo test -p kgen-runtime --release --target aarch64-unknown-linux-gnu "${int8_tests[@]}" \
            -- --nocapture
    fi
done
