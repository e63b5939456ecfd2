#!/usr/bin/env bash
# The runtime's kernel tests cross-compiled for aarch64 and run under
# qemu-user (`-cpu max`), as on an Arm server.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu ${QEMU_CPU:-max} -L /usr/aarch64-linux-gnu"
cargo test -p kgen-runtime --release --target aarch64-unknown-linux-gnu --test kernels
