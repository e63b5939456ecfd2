#!/usr/bin/env python3
"""The table of benches/peers.sh, from the lines its peers printed.

    python3 benches/peers_table.py peers.log

Reads `TAG key=value ...` lines: KGEN, CANDLE and LLAMACPP (one per case),
KGEN_BUSY and LLAMACPP_BUSY (the same beside a spinner process), KGEN_DRAM
(the DRAM-resident GEMV), KGEN_MOE and LLAMACPP_MOE (one mixture-of-experts
token, per thread count), KGEN_MOE_BATCH and LLAMACPP_MOE_BATCH (a batch of
tokens through the same experts), MACHINE and PEAK (one core's measured int8 dot
peak). Prints one row per case with kgen's GFLOPS (and GB/s of weights for a
GEMV; for a GEMM its share of the peak times the threads), llama.cpp's
faster mode, candle, and the ratios kgen/peer (above 1: kgen is faster);
then 2-thread / 1-thread beside the spinner, then the DRAM case against the
read bandwidth, then the MoE token (time per token; ratio llama.cpp's time
over kgen's, so above 1 is kgen faster here too).

With several rounds (peers.sh --rounds N: lines carry `round=R`), a peer's
figure is its median over the rounds, llama.cpp's mode the one with the
higher median, and a ratio the median of the rounds' own ratios followed by
their range (the busy table's 2T/1T too), so drift between rounds moves
both sides of each ratio alike.
"""

import shlex
import signal
import statistics
import sys
from collections import OrderedDict, defaultdict


def parse(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = shlex.split(line.strip())
            if not parts or "=" in parts[0]:
                continue
            kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
            kv["tag"] = parts[0]
            rows.append(kv)
    return rows


def key(r):
    return (r["format"], r["shape"], int(r["m"]), int(r["threads"]))


def num(r, field):
    if r is None or r.get("status") == "n/a" or field not in r:
        return None
    return float(r[field])


def fmt(v, spec="{:.1f}"):
    return "n/a" if v is None else spec.format(v)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    out = []
    for i, r in enumerate([header] + rows):
        out.append("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def rounds_of(rows, tag):
    """{case: {round: row}} for one tag (the last line wins within a round)."""
    out = OrderedDict()
    for r in rows:
        if r["tag"] == tag:
            out.setdefault(key(r), {})[int(r.get("round", 1))] = r
    return out


def merged(by_round):
    """One row for a case's rounds: the median of each numeric field over
    the rounds that measured it (rows marked `status=n/a` count only when
    no round measured the case)."""
    rows = [r for r in by_round.values() if r.get("status") != "n/a"] or list(by_round.values())
    out = dict(rows[0])
    for field in out:
        vals = [r[field] for r in rows if field in r]
        if len(set(vals)) < 2:
            continue
        try:
            out[field] = f"{statistics.median(float(t) for t in vals if t != 'n/a'):.5g}"
        except (ValueError, statistics.StatisticsError):
            pass
    out["rounds"] = len(rows)
    return out


def best_llama(rows, tag):
    """{case: {round: row}} of llama.cpp's mode with the higher median GFLOPS."""
    modes = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        if r["tag"] == tag and num(r, "gflops") is not None:
            modes[key(r)][r.get("mode", "")][int(r.get("round", 1))] = r
    out = {}
    for k, by_mode in modes.items():
        out[k] = max(by_mode.values(),
                     key=lambda rs: statistics.median(float(r["gflops"]) for r in rs.values()))
    return out


def paired(a, b, field="gflops"):
    """Median over the rounds both have of a/b, and the range, as text."""
    if not a or not b:
        return "n/a"
    rs = [num(a[i], field) / num(b[i], field) for i in a
          if i in b and num(a[i], field) and num(b[i], field)]
    if not rs:
        return "n/a"
    med = statistics.median(rs)
    if len(rs) == 1:
        return f"{med:.2f}"
    return f"{med:.2f} ({min(rs):.2f}-{max(rs):.2f})"


def main(path):
    rows = parse(path)
    isa = "native"
    for r in rows:
        if r["tag"] == "MACHINE":
            isa = r.get("isa", "native")
            print(f"machine: {r.get('cpu', '?')}, {r.get('cpus', '?')} CPUs, "
                  f"load average {r.get('load1', '?')} at the start")
            if isa == "avx2":
                print("every peer on its AVX2 code (peers.sh --isa avx2): kgen with "
                      "KGEN_FORCE_ISA=avx2, llama.cpp built without AVX-512, candle for x86-64-v3 "
                      "with MISTRALRS_FORCE_AVX2=1")
    peaks = [r for r in rows if r["tag"] == "PEAK" and num(r, "gops") is not None]
    peak = peaks[0] if peaks else None
    peak_gops = statistics.median(num(r, "gops") for r in peaks) if peaks else None
    if peak_gops is not None:
        print(f"int8 dot peak: {peak['isa']}, {peak_gops:.1f} GOPS per core (measured by kgen_peer)")
    kgen_r = rounds_of(rows, "KGEN")
    candle_r = rounds_of(rows, "CANDLE")
    llama_r = best_llama(rows, "LLAMACPP")
    kgen = OrderedDict((k, merged(v)) for k, v in kgen_r.items())
    candle = {k: merged(v) for k, v in candle_r.items()}
    rounds = max((r["rounds"] for r in kgen.values()), default=1)
    if rounds > 1:
        print(f"{rounds} rounds: medians, and ratios as the median (range) of each round's own")

    header = ["format", "op", "shape", "m", "thr", "kgen GFLOPS", "kgen GB/s or % peak",
              "llama.cpp GFLOPS", "candle GFLOPS", "candle Q4K",
              "kgen/llama", "kgen/candle", "kgen/Q4K", "kgen kernel", "llama.cpp kernel"]
    out = []
    for k, r in kgen.items():
        fmt_, shape, m, t = k
        kg = num(r, "gflops")
        ll = merged(llama_r[k]) if k in llama_r else None
        lg = num(ll, "gflops")
        cg = num(candle.get(k), "gflops")
        q4k_k = ("q4k", shape, m, t)
        q4k = num(candle.get(q4k_k), "gflops")
        out.append([
            fmt_, "gemv" if m == 1 else "gemm", shape, m, t,
            fmt(kg),
            fmt(num(r, "gbs")) if m == 1 else
            fmt(ratio(kg, peak_gops * t if peak_gops else None), "{:.0%}"),
            f"{fmt(lg)} ({ll['mode']})" if ll else "n/a",
            fmt(cg), fmt(q4k) if fmt_ in ("q4_0", "iq4_nl") else "",
            paired(kgen_r[k], llama_r.get(k)), paired(kgen_r[k], candle_r.get(k)),
            paired(kgen_r[k], candle_r.get(q4k_k)) if fmt_ in ("q4_0", "iq4_nl") else "",
            r.get("kernel", "?"), ll.get("kernel", "?") if ll else "",
        ])
    if out:
        print()
        cpu = "x86-64-v3" if isa == "avx2" else "native"
        print(f"kgen next to llama.cpp (faster of plain/repack) and candle (target-cpu={cpu}); "
              "ratios above 1: kgen faster")
        print(table(header, out))

    busy_kr = rounds_of(rows, "KGEN_BUSY")
    busy_k = OrderedDict((k, merged(v)) for k, v in busy_kr.items())
    busy_lr = best_llama(rows, "LLAMACPP_BUSY")
    busy_l = {k: merged(v) for k, v in busy_lr.items()}
    if busy_k:
        print()
        print("busy core: beside a spinner process; 2T/1T is the 2-thread GFLOPS over the "
              "1-thread GFLOPS (target: never below 1)")
        header = ["format", "op", "shape", "m", "kgen 1T", "kgen 2T", "kgen 2T/1T",
                  "kgen 2T/1T quiet", "llama.cpp 1T", "llama.cpp 2T", "llama.cpp 2T/1T"]
        out = []
        for (fmt_, shape, m, t), r in busy_k.items():
            if t != 1:
                continue
            k1, k2 = (fmt_, shape, m, 1), (fmt_, shape, m, 2)
            b1, b2 = num(r, "gflops"), num(busy_k.get(k2), "gflops")
            l1 = num(busy_l.get(k1), "gflops")
            l2 = num(busy_l.get(k2), "gflops")
            out.append([fmt_, "gemv" if m == 1 else "gemm", shape, m, fmt(b1), fmt(b2),
                        paired(busy_kr.get(k2), busy_kr.get(k1)),
                        paired(kgen_r.get(k2), kgen_r.get(k1)),
                        fmt(l1), fmt(l2), paired(busy_lr.get(k2), busy_lr.get(k1))])
        print(table(header, out))

    dram = [merged(v) for v in rounds_of(rows, "KGEN_DRAM").values()]
    if dram:
        print()
        r0 = dram[0]
        print(f"DRAM-resident GEMV: {r0['shape']}, {r0['mats']} matrices of the format in turn "
              f"(about {r0['weights_mb']} MB, L3 {r0['l3_mb']} MiB from {r0['l3_from']}), "
              "against the read bandwidth with as many threads")
        header = ["format", "thr", "mats", "MB", "kgen GB/s", "read GB/s", "fraction", "kernel"]
        print(table(header, [[r["format"], r["threads"], r["mats"], r["weights_mb"], r["gbs"],
                              r["read_gbs"], r["fraction"], r["kernel"]] for r in dram]))

    moe_table(rows)


def moe_table(rows):
    """The MoE cases per thread count, one token and a batch of tokens:
    kgen's Experts (and, for one token, its dense matrices of the same
    bytes), llama.cpp's faster mode of mul_mat_id, and the ratio."""
    for suffix in ("", "_BATCH"):
        kgen = defaultdict(dict)
        llama = defaultdict(lambda: defaultdict(dict))
        for r in rows:
            t, rnd = int(r.get("threads", 0)), int(r.get("round", 1))
            if r["tag"] == "KGEN_MOE" + suffix:
                kgen[t][rnd] = r
            elif r["tag"] == "LLAMACPP_MOE" + suffix and num(r, "median_us") is not None:
                llama[t][r.get("mode", "")][rnd] = r
        if kgen:
            moe_rows(kgen, llama, batch=bool(suffix))


def moe_rows(kgen, llama, batch):
    """The table of one MoE case: {threads: {round: row}} of kgen and
    {threads: {mode: {round: row}}} of llama.cpp."""
    print()
    if batch:
        b = next(iter(next(iter(kgen.values())).values())).get("batch", "?")
        print(f"mixture-of-experts batch of {b} tokens (the same experts, 8 picks per token; kgen: "
              "Experts::gemm_routed); us per batch (GFLOPS); ratio llama.cpp / kgen time")
        header = ["thr", "kgen", "llama.cpp (mode)", "ratio"]
    else:
        print("mixture-of-experts token: top-8 of 128 experts of 2048x768 (Q4_K gate and up, Q6_K "
              "down), weights in DRAM; us per token (GB/s of the picked experts); ratio "
              "llama.cpp / kgen time, above 1: kgen faster")
        header = ["thr", "kgen", "kgen dense, same bytes", "llama.cpp (mode)", "ratio"]
    rate = "gflops" if batch else "gbs"
    out = []
    for t in sorted(kgen):
        k = merged(kgen[t])
        best = min(llama[t].values(), default=None,
                   key=lambda rs: statistics.median(float(r["median_us"]) for r in rs.values()))
        if best:
            mode = next(iter(best.values())).get("mode", "?")
            lm = merged(best)
            lcell = f"{float(lm['median_us']):.0f} ({float(lm[rate]):.1f}, {mode})"
            # time ratio llama / kgen per round
            rs = [float(best[i]["median_us"]) / float(kgen[t][i]["median_us"])
                  for i in kgen[t] if i in best]
            rcell = "n/a" if not rs else (f"{statistics.median(rs):.2f}" if len(rs) == 1 else
                                          f"{statistics.median(rs):.2f} ({min(rs):.2f}-{max(rs):.2f})")
        else:
            lcell, rcell = "n/a", "n/a"
        kcell = f"{float(k['median_us']):.0f} ({float(k[rate]):.1f})"
        dense = [] if batch else [f"{float(k['dense_us']):.0f}"]
        out.append([t, kcell, *dense, lcell, rcell])
    print(table(header, out))


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when the reader goes away
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
