#!/usr/bin/env bash
# Port-level throughput of a generated int8 micro kernel's block loop, from
# llvm-mca's scheduling model of a CPU: a second opinion beside the op count
# of `kgen plan --explain` on machines without cycle counters (the VMs here
# have none). Usage:
#   bash scripts/mca.sh TARGET FORMAT KERNEL [MCPU]
#   bash scripts/mca.sh zen3 q4_k q4_k_gemm_4x8__avx2 znver3
# KERNEL is a kernel name from `kgen --target TARGET --format FORMAT
# --no-profile` (the model's tiles; GEMMs at m = 32); the script compiles
# that file with rustc -C opt-level=3 for this host (x86 kernels only),
# takes the kernel's innermost loop with the most byte dots (the micro
# kernel for M_R rows) and prints llvm-mca's cycles per iteration, which is
# one 32-value block unless LLVM unrolled the loop, and its bottleneck.
# Needs llvm-mca (Debian: `apt-get install llvm`). Nothing here is run by CI.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: mca.sh TARGET FORMAT KERNEL [MCPU]}
format=${2:?format}
kernel=${3:?kernel name}
mcpu=${4:-znver3}
command -v llvm-mca > /dev/null || { echo "mca.sh: llvm-mca not found (apt-get install llvm)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -n "${KGEN_BIN:-}" ] || cargo build --release -q -p kgen
kgen=${KGEN_BIN:-target/release/kgen}
isa=${kernel##*__}
"$kgen" --target "$target" --format "$format" --isa "$isa" --no-profile > "$work/all.rs"
# Only the named kernel's module: its loops are then the only ones.
awk -v m="pub mod $kernel {" '
    index($0, m) == 1 { keep = 1 }
    keep { print }
    keep && /^}/ { exit }
' "$work/all.rs" > "$work/k.rs"
[ -s "$work/k.rs" ] || { echo "mca.sh: no kernel $kernel in kgen --target $target --format $format" >&2; exit 1; }
rustc --edition 2021 --crate-type=lib -C opt-level=3 --emit asm -o "$work/k.s" "$work/k.rs" 2> "$work/rustc.err" ||
    { grep -m5 '^error' "$work/rustc.err" >&2; exit 1; }
# The loop (a label and the backward jump to it) with the most dots.
python3 - "$work/k.s" > "$work/loop.s" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().split("\n")
labels = {m.group(1): i for i, l in enumerate(lines) if (m := re.match(r"^(\.LBB[\w]+):", l))}
dots = ("vpmaddubsw", "vpdpbusd", "vpmaddwd", "vpdpwssd")
loops = []
for i, l in enumerate(lines):
    m = re.match(r"^\s+j\w+\s+(\.LBB[\w]+)", l)
    if m and m.group(1) in labels and labels[m.group(1)] < i:
        loops.append((labels[m.group(1)], i))
best = None
for s, e in loops:
    # Innermost loops only: no other loop inside this one.
    if any(s <= s2 and e2 < e for s2, e2 in loops if (s2, e2) != (s, e)):
        continue
    body = [x for x in lines[s + 1 : e + 1]
            if x.strip() and not x.strip().startswith((".", "#")) and not x.startswith(".LBB")]
    n = sum(any(d in x for d in dots) for x in body)
    if best is None or n > best[0]:
        best = (n, body)
if best is None or best[0] == 0:
    sys.exit("mca.sh: no loop with x86 byte dots found")
print("\n".join(best[1]))
EOF
echo "$kernel on $mcpu: $(grep -c . "$work/loop.s") instructions in the block loop," \
     "$(grep -c 'rsp' "$work/loop.s" || true) stack accesses"
llvm-mca -mcpu="$mcpu" -iterations=200 -bottleneck-analysis "$work/loop.s" 2>&1 |
    awk '/^Iterations:/ { it = $2 } /^Total Cycles:/ { printf "cycles per block: %.1f\n", $3 / it }
         /^Throughput Bottlenecks:/, /^Critical sequence/ { if ($0 !~ /^Critical/) print }'
