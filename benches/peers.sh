#!/usr/bin/env bash
# One peer bench: kgen next to llama.cpp and candle, per case (format, op,
# shape, m, threads), with the ratios.
#
#   bash benches/peers.sh                                   # the default cases
#   bash benches/peers.sh --formats q4_0,q8_0 --m 1,32 --threads 1 --min-time 0.2
#   bash benches/peers.sh --large --busy --dram             # everything
#
# Options (lists are comma-separated):
#   --formats F   q4_0,q8_0,iq4_nl,q5_0 (default: all four)
#   --shapes S    KxN shapes, K the reduction (default 4096x4096)
#   --large       add 11008x4096 and 4096x11008 to the shapes
#   --m M         activation rows (default 1,32,128; m=1 is the GEMV)
#   --threads T   thread counts (default 1,2, capped at the CPUs online)
#   --min-time S  seconds of timed calls per case and peer (default 0.5)
#   --rounds N    run the peers N times in turn, kgen, llama.cpp, candle,
#                 kgen, ... (default 1); the table gives each peer's median
#                 over the rounds and each ratio as the median of the rounds'
#                 own ratios, with their range. On a VM whose neighbours move
#                 a process's speed by a third between runs, a ratio of two
#                 lone runs says little; pairs taken minutes apart say more
#   --busy        also run kgen and llama.cpp on 1 and 2 threads beside a
#                 spinner process (a shell busy loop, pinned to no core), and
#                 report 2-thread / 1-thread
#   --dram        also a DRAM-resident GEMV for kgen: enough 4096x11008
#                 matrices to hold 4x the L3 cache (from sysfs), called in
#                 turn, against the read bandwidth measured in the same run
#   --moe         also one token through a mixture-of-experts FFN shaped like
#                 Qwen3-30B-A3B's (top-8 of 128 experts of 2048x768, Q4_K gate
#                 and up, Q6_K down, weights in DRAM): kgen's Experts
#                 (runtime/examples/moe_gemv.rs, which also times dense
#                 matrices of the same bytes) next to llama.cpp's
#                 ggml_mul_mat_id (benches/llamacpp/bench_moe.cpp), 400 tokens
#                 per thread count and round; then a batch of 32 tokens (a
#                 prompt: Experts::gemm_routed, moe_gemv.rs with a batch,
#                 against mul_mat_id on 32 tokens), 20 batches
#   --isa avx2    every peer on its AVX2 code, on a CPU that has more: kgen
#                 with KGEN_FORCE_ISA=avx2 (no dot peak: AVX2 has no single
#                 byte dot), llama.cpp built with GGML_NATIVE=OFF (run.sh's
#                 LCP_ISA=avx2: AVX2/FMA/F16C, no AVX-512), candle with
#                 target-cpu=x86-64-v3 and MISTRALRS_FORCE_AVX2=1 (its
#                 repacked tiles pick their tier at run time, whatever the
#                 build's target-cpu; that variable holds them to AVX2).
#                 A proxy for an AVX2-only CPU, not one: the core's caches,
#                 ports and clocks stay this machine's.
#   --out DIR     keep the raw lines in DIR (default: a fresh temporary dir)
#
# Each peer runs in its own process, one after another, never two at once:
#   kgen      benches/src/bin/kgen_peer.rs, an ordinary release build (no
#             target-cpu=native: RUSTFLAGS is cleared for it), kgen_runtime's
#             Matrix on a Pool of T threads; the kernel is the one dispatch
#             picks at run time. It first measures one core's int8 dot peak
#             (PEAK), which the table sets each GEMM against.
#   llama.cpp benches/llamacpp/bench_mul_mat.cpp on ggml's CPU backend
#             (GGML_NATIVE build, or AVX2 with --isa avx2; see
#             benches/llamacpp/README.md), modes plain and repack; the table
#             takes the faster one per case.
#   candle    benches/candle-peer, candle-core's QMatMul, built with
#             RUSTFLAGS="-C target-cpu=native" (x86-64-v3 with --isa avx2) in
#             its own target directory ($CARGO_TARGET_DIR/candle-native or
#             candle-x86-64-v3), one process per thread count
#             (RAYON_NUM_THREADS=T sizes its pool). It has no IQ4_NL (n/a);
#             its Q4K, its best 4-bit format on x86, is timed too.
# The table goes to stdout; the peers' lines and diagnostics go to stderr.
# Every peer checks its results against the dequantized weights (relative
# error below 2e-2) and fails the run otherwise.
#
# Timing, in all three: 3 warm-up calls, then about --min-time seconds of
# calls (10 to 2000), median; weights stay warm in cache between calls,
# except in the DRAM case. GFLOPS = 2*m*K*N / t; GB/s (m=1) = weight bytes
# of the format / t. Ratios above 1 mean kgen is faster.
#
# Environment: CARGO_TARGET_DIR (where kgen_peer is built; candle goes to
# its candle-<cpu> subdirectory), and run.sh's LCP_* / JOBS for llama.cpp.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FORMATS=q4_0,q8_0,iq4_nl,q5_0
SHAPES=4096x4096
MS=1,32,128
THREADS=1,2
MIN_TIME=0.5
ROUNDS=1
BUSY=0
DRAM=0
MOE=0
LARGE=0
ISA=native
OUT=""

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --formats) FORMATS="$2"; shift 2 ;;
        --shapes) SHAPES="$2"; shift 2 ;;
        --large) LARGE=1; shift ;;
        --m) MS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --min-time) MIN_TIME="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --busy) BUSY=1; shift ;;
        --dram) DRAM=1; shift ;;
        --moe) MOE=1; shift ;;
        --isa) ISA="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "peers.sh: unknown argument $1" >&2; usage ;;
    esac
done

[ "$LARGE" = 1 ] && SHAPES="$SHAPES,11008x4096,4096x11008"
case "$ISA" in
    native) CANDLE_CPU=native; unset MISTRALRS_FORCE_AVX2 MISTRALRS_FORCE_AVXVNNI ;;
    avx2)
        if [ "$(uname -m)" != x86_64 ] || ! grep -qw avx2 /proc/cpuinfo; then
            echo "peers.sh: --isa avx2 needs an x86_64 CPU with AVX2" >&2; exit 2
        fi
        CANDLE_CPU=x86-64-v3
        export KGEN_FORCE_ISA=avx2 LCP_ISA=avx2 MISTRALRS_FORCE_AVX2=1 ;;
    *) echo "peers.sh: --isa is native or avx2, not $ISA" >&2; exit 2 ;;
esac
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "peers.sh: --rounds must be a positive integer, not $ROUNDS" >&2; exit 2; }
CPUS="$(nproc)"
THREADS="$(tr ',' '\n' <<< "$THREADS" | awk -v c="$CPUS" '$1 <= c' | paste -sd, -)"
[ -n "$THREADS" ] || { echo "peers.sh: no thread count fits $CPUS CPUs" >&2; exit 2; }
if [ "$BUSY" = 1 ] && [ "$CPUS" -lt 2 ]; then
    echo "peers.sh: --busy needs 2 CPUs" >&2; exit 2
fi
# llama.cpp's formats: the GGUF types its bench knows (kgen's own k1 / k2_*
# have no peer there).
LLAMA_FORMATS="$(tr ',' '\n' <<< "$FORMATS" \
    | grep -xE 'q4_0|q8_0|q5_0|iq4_nl|iq4_xs|q4_1|q5_1|q4_k|q5_k|q6_k|q3_k|q2_k|tq1_0|tq2_0|mxfp4|iq1_s|iq1_m|iq2_xxs|iq2_xs|iq2_s|iq3_xxs|iq3_s' \
    | paste -sd, -)" || true
# candle's formats: the GGUF ones it has, plus its Q4K as the 4-bit reference.
CANDLE_FORMATS="$FORMATS"
case ",$FORMATS," in *,q4_0,*|*,iq4_nl,*) CANDLE_FORMATS="$FORMATS,q4k" ;; esac

TGT="${CARGO_TARGET_DIR:-$ROOT/target}"
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/kgen-peers.XXXXXX)"
mkdir -p "$OUT"
LOG="$OUT/peers.log"
: > "$LOG"

# 1. builds, one after another
echo "== building kgen_peer (default release build, RUSTFLAGS cleared)" >&2
(cd "$ROOT" && env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS CARGO_TARGET_DIR="$TGT" \
    cargo build --release -q -p kgen-benches --bin kgen_peer)
KGEN="$TGT/release/kgen_peer"
if [ "$MOE" = 1 ]; then
    echo "== building moe_gemv (default release build, RUSTFLAGS cleared)" >&2
    (cd "$ROOT" && env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS CARGO_TARGET_DIR="$TGT" \
        cargo build --release -q -p kgen-runtime --example moe_gemv)
fi
KGEN_MOE="$TGT/release/examples/moe_gemv"
echo "== building candle_peer (RUSTFLAGS=-C target-cpu=$CANDLE_CPU, $TGT/candle-$CANDLE_CPU)" >&2
(cd "$ROOT" && env -u CARGO_ENCODED_RUSTFLAGS RUSTFLAGS="-C target-cpu=$CANDLE_CPU" \
    CARGO_TARGET_DIR="$TGT/candle-$CANDLE_CPU" \
    cargo build --release -q -p kgen-candle-peer --bin candle_peer)
CANDLE="$TGT/candle-$CANDLE_CPU/release/candle_peer"
echo "== building llama.cpp's bench (benches/llamacpp/run.sh)" >&2
LCP="$(bash "$ROOT/benches/llamacpp/run.sh" --build-only)"
LCP_MOE="$(dirname "$LCP")/bench_moe"

SPIN_PID=""
stop_spinner() {
    if [ -n "$SPIN_PID" ]; then
        kill "$SPIN_PID" 2> /dev/null || true
        wait "$SPIN_PID" 2> /dev/null || true
        SPIN_PID=""
    fi
}
trap stop_spinner EXIT
trap 'exit 130' INT TERM

# 2. runs, one after another; stdout lines (tagged) go to the log
ROUND=1
run() { # label sed-script command...: the command's lines, edited and tagged
        # with the round, to the log (and stderr)
    echo "== $1 (round $ROUND of $ROUNDS)" >&2
    local script="$2"
    shift 2
    "$@" | sed -u "$script" | sed -u "/^[A-Z_]* /s/\$/ round=$ROUND/" | tee -a "$LOG" >&2
}
CASES=(--shapes "$SHAPES" --m "$MS" --min-time "$MIN_TIME")
DRAM_ARG=()
[ "$DRAM" = 1 ] && DRAM_ARG=(--dram)
{
    echo "MACHINE cpu=\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')\"" \
         "cpus=$CPUS load1=$(cut -d' ' -f1 /proc/loadavg) isa=$ISA"
} | tee -a "$LOG" >&2
for ROUND in $(seq "$ROUNDS"); do
    run "kgen: $FORMATS" "" "$KGEN" --formats "$FORMATS" --threads "$THREADS" "${CASES[@]}" "${DRAM_ARG[@]}"
    [ -z "$LLAMA_FORMATS" ] ||
        run "llama.cpp: $LLAMA_FORMATS" "" "$LCP" --type "$LLAMA_FORMATS" --modes plain,repack --threads "$THREADS" "${CASES[@]}"
    for t in ${THREADS//,/ }; do
        run "candle: $CANDLE_FORMATS, $t thread(s)" "" env RAYON_NUM_THREADS="$t" \
            "$CANDLE" --formats "$CANDLE_FORMATS" --threads "$t" "${CASES[@]}"
    done
    if [ "$MOE" = 1 ]; then
        for t in ${THREADS//,/ }; do
            run "kgen: MoE token, $t thread(s)" "/^KGEN_MOE /!d" "$KGEN_MOE" "$t" 400
        done
        run "llama.cpp: MoE token (ggml_mul_mat_id)" "" "$LCP_MOE" --threads "$THREADS" --tokens 400
        for t in ${THREADS//,/ }; do
            run "kgen: MoE batch of 32, $t thread(s)" "/^KGEN_MOE_BATCH /!d" "$KGEN_MOE" "$t" 20 32
        done
        run "llama.cpp: MoE batch of 32 (ggml_mul_mat_id)" "" "$LCP_MOE" --threads "$THREADS" --tokens 20 --batch 32
    fi
    if [ "$BUSY" = 1 ]; then
        sh -c 'while :; do :; done' &
        SPIN_PID=$!
        sleep 0.3
        echo "== busy core: spinner pid $SPIN_PID" >&2
        run "kgen beside the spinner" 's/^KGEN /KGEN_BUSY /; s/^PEAK /PEAK_BUSY /' \
            "$KGEN" --formats "$FORMATS" --threads 1,2 "${CASES[@]}"
        [ -z "$LLAMA_FORMATS" ] ||
            run "llama.cpp beside the spinner" 's/^LLAMACPP /LLAMACPP_BUSY /' \
                "$LCP" --type "$LLAMA_FORMATS" --modes plain,repack --threads 1,2 "${CASES[@]}"
        stop_spinner
    fi
done

# 3. the table, alone on stdout
python3 "$ROOT/benches/peers_table.py" "$LOG"
echo "raw lines: $LOG" >&2
