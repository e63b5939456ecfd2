#!/usr/bin/env bash
# Builds the runtime with the kernels of every shipped target (x86_64 ones
# natively, aarch64 ones for aarch64), so every target's generated code is
# proven to compile for its architecture.
set -euo pipefail
cd "$(dirname "$0")/.."
x86=() arm=()
for f in targets/*.toml; do
    name=$(basename "$f" .toml)
    if grep -q '^arch *= *"aarch64"' "$f"; then arm+=("$name"); else x86+=("$name"); fi
done
join() { local IFS=,; echo "$*"; }
specs="2:32,2:128,2:col,3:32,3:128,3:col,4:32,4:128,4:col,8:64"
KGEN_SPECS=$specs KGEN_TARGETS=$(join "${x86[@]}") \
    cargo check -q -p kgen-runtime --target-dir target/check-targets
KGEN_SPECS=$specs KGEN_TARGETS=$(join "${arm[@]}") \
    cargo check -q -p kgen-runtime --target aarch64-unknown-linux-gnu --target-dir target/check-targets
echo "kernels for ${#x86[@]} x86_64 and ${#arm[@]} aarch64 targets compile"
