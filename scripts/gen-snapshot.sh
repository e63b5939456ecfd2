#!/usr/bin/env bash
# Writes what kgen generates for a fixed set of targets and formats into DIR,
# so a refactor can be checked byte for byte:
#   bash scripts/gen-snapshot.sh /tmp/before   # on the old tree
#   bash scripts/gen-snapshot.sh /tmp/after    # on the new tree
#   diff -r /tmp/before /tmp/after
# Profiles are ignored (--no-profile) and nothing is timed.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gen-snapshot.sh DIR}
mkdir -p "$out"
[ -n "${KGEN_BIN:-}" ] || cargo build --release -q -p kgen
kgen=${KGEN_BIN:-target/release/kgen}
for t in zen4 zen3 haswell x86-64-v4 neoverse-v1 apple-m1 generic-x86_64; do
    for spec in "4 32" "3 128" "2 64" "8 col" "4 128"; do
        set -- $spec
        $kgen --target "$t" --bits "$1" --group "$2" --isa all --no-profile > "$out/f32-$t-q$1g$2.rs"
        $kgen plan --target "$t" --bits "$1" --group "$2" --no-profile --json > "$out/plan-$t-q$1g$2.json"
    done
done
for t in zen4 zen3 x86-64-v3 x86-64-v3-vnni x86-64-v4-vnni alderlake neoverse-n1 neoverse-v1 \
         neoverse-v2 apple-m1 generic-aarch64-sve256 generic-aarch64-i8mm generic-aarch64-dotprod \
         generic-aarch64-portable; do
    for f in ${KGEN_SNAPSHOT_FORMATS:-q4_0 q8_0 iq4_nl q5_0}; do
        $kgen --target "$t" --format "$f" --isa all --no-profile > "$out/int8-$t-$f.rs" 2> "$out/int8-$t-$f.err" || true
        $kgen plan --target "$t" --format "$f" --no-profile --json > "$out/plan-int8-$t-$f.json" 2>&1 || true
        $kgen plan --target "$t" --format "$f" --m 32 --no-profile --json > "$out/plan-int8-$t-$f-m32.json" 2>&1 || true
    done
done
# The --explain reports (op counts and candidates) for a few targets.
for t in zen4 zen3 neoverse-v1 apple-m1; do
    $kgen plan --target "$t" --bits 4 --group 32 --no-profile --explain > "$out/explain-$t-q4g32.txt" 2>&1 || true
    for f in q4_0 q5_0; do
        $kgen plan --target "$t" --format "$f" --no-profile --explain > "$out/explain-int8-$t-$f.txt" 2>&1 || true
        $kgen plan --target "$t" --format "$f" --m 32 --no-profile --explain > "$out/explain-int8-$t-$f-m32.txt" 2>&1 || true
    done
done
echo "snapshot in $out: $(ls "$out" | wc -l) files"
