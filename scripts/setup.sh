#!/usr/bin/env bash
# One-time setup: Rust components and targets, the aarch64 cross toolchain
# and qemu-user, and the Python packages the tests use to write real
# safetensors/GGUF files. Safe to re-run.
set -euo pipefail
rustup component add rustfmt clippy >/dev/null 2>&1 || true
rustup target add aarch64-unknown-linux-gnu
need_apt=()
command -v qemu-aarch64 >/dev/null || need_apt+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || need_apt+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
python3 -m pip install --quiet --disable-pip-version-check -r "$(dirname "$0")/requirements.txt"
