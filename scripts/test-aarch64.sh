#!/usr/bin/env bash
# The runtime's kernel tests cross-compiled for aarch64 and run under
# qemu-user, as on an Arm server: NEON, dotprod (sdot) and portable kernels
# (and the routed expert GEMVs of `model.rs`, on each of them)
# against the oracle. Runs once per CPU model in QEMU_CPUS (default
# `max neoverse-n1 cortex-a57`: everything qemu implements, an Armv8.2 server
# core with dotprod, and an Armv8.0 core without it, where dispatch must fall
# back without SIGILL); set QEMU_CPU=<model> to run one model only.
# The int8 suites sweep every ISA the CPU runs, so `max` runs them in full;
# the smaller cores run a strict subset of those kernels, the same code under
# the same emulator, and only need dispatch checked: there the int8 suites run
# their KGEN_FORCE_ISA tests (every format on every ISA the core runs, selected
# in a child process and checked against the oracle on small shapes).
# QEMU_FULL=1 runs the full suites on every model.
# Then the named Arm targets' own kernels (neoverse-n1, neoverse-v1,
# neoverse-v2, cortex-a76, apple-m1), one build each: see
# scripts/test-arm-targets.sh (ARM_TARGETS=<names> to pick, empty to skip).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
tests=(--test kernels --test aarch64_neon --test model)
int8_tests=(--test int8 --test int8_formats)
cpus=${QEMU_CPU:-${QEMU_CPUS:-max neoverse-n1 cortex-a57}}
for cpu in $cpus; do
    echo "== qemu-aarch64 -cpu $cpu"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu -L /usr/aarch64-linux-gnu"
    cargo test -p kgen-runtime --release --target aarch64-unknown-linux-gnu "${tests[@]}"
    if [[ $cpu == max || ${QEMU_FULL:-} == 1 ]]; then
        cargo test -p kgen-runtime --release --target aarch64-unknown-linux-gnu "${int8_tests[@]}"
    else
        cargo test -p kgen-runtime --release --target aarch64-unknown-linux-gnu "${int8_tests[@]}" \
            -- force_isa_selects_each_isa
    fi
done
unset CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER
bash scripts/test-arm-targets.sh
