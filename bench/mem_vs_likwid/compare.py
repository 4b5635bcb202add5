"""tiers probe mem vs likwid-bench: STREAM Copy and Triad, same run.

For every thread count, each round runs tiers once with --stores auto
(each kernel runs its repetitions with regular stores, then with
non-temporal stores, and reports the variant with the shorter mean time;
the document keeps both) and every likwid-bench variant of ``copy`` and
``stream`` (STREAM's Triad is likwid's ``stream``; likwid's ``triad`` is a
different four-stream kernel) that this CPU can run, alternating tools
within the round.  Working sets match: tiers' --size is bytes per array;
likwid's -W S0:SIZE:THREADS SIZE is all arrays together (2 for copy, 3 for
stream).  By default each array is 4x the last-level cache (STREAM's rule;
on a 260 MiB L3 that is 1.1 GB per array) and both tools place the pages by
first touch of each thread (tiers --placement first-touch, likwid -W; with
--placement master likwid gets -w, one thread initialising).  Both count data volume as STREAM does, without write-allocate
traffic (16 B per element for copy, 24 for triad), in MB/s with MB = 10^6 B.

likwid reports one rate over all its iterations, a mean; tiers reports the
best repetition (STREAM's "Best Rate") and the min/avg/max times.  The
ratios therefore use tiers' mean rate (bytes / average time), like for like;
tiers' best rate is shown beside it, and the target (>= 0.95 of likwid's best
variant) must hold on both.  Medians over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchlib import fail, tiers_command  # noqa: E402
import benchlib  # noqa: E402

benchlib.NAME = "mem_vs_likwid"

KERNELS = {"copy": ("copy", 2), "triad": ("stream", 3)}  # tiers kernel -> likwid test, arrays
TARGET = 0.95


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def likwid_variants(test: str) -> list[str]:
    """likwid-bench's double-precision variants of ``test`` this CPU can run."""
    out = subprocess.run(["likwid-bench", "-a"], capture_output=True, text=True).stdout
    names = [ln.split(" - ")[0].strip() for ln in out.splitlines() if " - " in ln]
    flags = cpu_flags()
    keep = []
    for name in names:
        if name != test and not name.startswith(test + "_"):
            continue
        parts = name.split("_")[1:]
        if "sp" in parts:
            continue  # single precision
        need = {"avx": "avx", "avx512": "avx512f", "fma": "fma", "sse": "sse2"}
        if any(p in need and need[p] not in flags for p in parts):
            continue
        keep.append(name)
    return keep


def llc_bytes() -> int:
    """The largest cache of CPU 0 in bytes (sysfs), 0 when unknown."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            try:
                with open(os.path.join(base, entry, "size"), encoding="utf-8") as f:
                    text = f.read().strip()
            except OSError:
                continue
            mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
            digits = text.rstrip("KMG")
            if digits.isdigit():
                best = max(best, int(digits) * mult)
    except OSError:
        pass
    return best


def run_likwid(variant: str, bytes_total: int, threads: int, iters: int,
               per_thread_init: bool = True) -> float | str:
    """likwid's MByte/s for one run, or a string saying why the run failed
    (some variants crash in likwid 5.2, e.g. stream_mem with SIGSEGV)."""
    # likwid 5.2 cannot read sizes of 2^31 B or more in bytes: give kB (10^3 B)
    size = f"{bytes_total}B" if bytes_total < 2**31 else f"{bytes_total // 1000}kB"
    cmd = ["likwid-bench", "-t", variant, "-W" if per_thread_init else "-w",
           f"S0:{size}:{threads}", "-i", str(iters)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"^MByte/s:\s*([0-9.]+)", proc.stdout, re.M)
    if proc.returncode != 0 or not m:
        if proc.returncode < 0:
            return f"killed by signal {-proc.returncode}"
        return f"exit status {proc.returncode}"
    return float(m.group(1))


def run_tiers(tiers: list[str], stores: str, threads: int, array_bytes: int, ntimes: int,
              placement: str) -> dict:
    """Returns {"rates": {kind: {kernel: (best MB/s, mean MB/s)}}, "params"}: kind
    "auto" (each kernel's variant with the shorter mean time, as tiers reports
    it), "regular" and "nt" (both variants, each a block of repetitions in
    the same auto run)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mem.json")
        cmd = [*tiers, "probe", "mem", "--threads", str(threads), "--pin", "compact",
               "--placement", placement, "--kernels", ",".join(KERNELS), "--size",
               str(array_bytes), "--ntimes", str(ntimes), "--stores", stores, "--json", path,
               "--plot", os.path.join(tmp, "mem.png")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            fail(f"tiers failed: {proc.stderr.strip()}")
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    rates: dict[str, dict] = {}
    for res in doc["samples"][0]["results"]:
        mean = res["bytes"] / res["avg_time_s"] / 1e6
        rates.setdefault(stores, {})[res["kernel"]] = (res["best_rate_mbps"], mean)
        for v in res.get("variants", []):
            rates.setdefault(v["stores"], {})[res["kernel"]] = (
                v["best_rate_mbps"], res["bytes"] / v["avg_time_s"] / 1e6)
    return {"rates": rates, "params": doc["params"]}


def machine() -> dict:
    info = {"cpu": platform.processor(), "cores": os.cpu_count(), "memory_gib": None}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            key, _, val = line.partition(":")
            if key.strip() == "Model name":
                info["cpu"] = val.strip()
            if key.strip() == "L3 cache":
                info["l3"] = val.strip()
            if key.strip() == "Hypervisor vendor":
                info["hypervisor"] = val.strip()
    except OSError:
        pass
    try:
        info["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                   / 2**30, 1)
    except (ValueError, OSError):
        pass
    ver = subprocess.run(["likwid-bench", "-v"], capture_output=True, text=True).stdout.strip()
    info["likwid"] = ver.splitlines()[0] if ver else "?"
    return info


def spread_of(values: list[float]) -> float:
    """(max - min) / median: how far apart the rounds' figures lie."""
    return (max(values) - min(values)) / statistics.median(values)


def replay(path: str, args) -> int:
    """Print the tables again from a document written by --json."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        samples = {(d["tool"], d["kernel"], d["threads"]): d["values"] for d in doc["samples"]}
        threads = sorted({d["threads"] for d in doc["samples"]})
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"cannot read {path} as a mem_vs_likwid document: {e}")
    variants = {k: [] for k in KERNELS}
    for tool, kernel, _ in samples:
        if not tool.startswith("tiers") and tool not in variants[kernel]:
            variants[kernel].append(tool)
    args.json = None
    info = doc.get("machine", {})
    print(f"replayed from {path}: {doc.get('args', {}).get('rounds', '?')} rounds, "
          f"machine {info.get('cpu', '?')}, L3 {info.get('l3', '?')}")
    report(samples, variants, doc.get("likwid_failed", {}), threads,
           doc.get("default_stores"), info, args)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--array-bytes", type=int, default=None,
                    help="bytes per array (default: 4x the last-level cache, at least 160e6)")
    ap.add_argument("--ntimes", type=int, default=20,
                    help="tiers repetitions and likwid iterations (default 20)")
    ap.add_argument("--placement", default="first-touch", choices=["first-touch", "master"],
                    help="tiers placement; likwid gets -W (each thread initialises its chunk) "
                    "for first-touch, -w (one thread) for master (default first-touch)")
    ap.add_argument("--json", metavar="FILE", help="also write the raw rates as JSON")
    ap.add_argument("--replay", metavar="FILE",
                    help="measure nothing: print the tables of a document written by --json")
    args = benchlib.parse_args(ap, {"rounds": 1, "ntimes": 6})
    if args.replay:
        return replay(args.replay, args)
    llc = llc_bytes()
    if args.array_bytes is None:
        args.array_bytes = max(160_000_000, 4 * llc)
    if args.rounds < 1 or args.array_bytes < 1024 or args.ntimes < 1:
        fail("--rounds and --ntimes must be at least 1 and --array-bytes at least 1024")
    try:
        threads = [int(t) for t in args.threads.split(",")]
        if not threads or min(threads) < 1:
            raise ValueError
    except ValueError:
        fail(f"bad --threads '{args.threads}': use a list such as 1,2")
    if args.dry_run:
        benchlib.dry_run(args, command=True, steps=[
            f"{args.rounds} alternating rounds at {args.threads} threads of tiers probe mem "
            "(--stores auto: regular and non-temporal stores, one block each) and likwid-bench's "
            "copy and stream variants"])
    if shutil.which("likwid-bench") is None:
        fail("likwid-bench is not installed (Debian package likwid)")
    tiers = tiers_command()
    variants = {k: likwid_variants(test) for k, (test, _) in KERNELS.items()}
    if args.quick:
        # a check that every step runs: the plain variant and the AVX-512
        # non-temporal one (the nt/512 column), not all of them
        variants = {k: [v for v in vs if v in (test, test + "_mem_avx512")] or vs[:1]
                    for (k, vs), (test, _) in zip(variants.items(), KERNELS.values())}

    info = machine()
    guest = f", {info['hypervisor']} guest" if "hypervisor" in info else ""
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB, "
          f"L3 {info.get('l3', '?')}{guest}")
    print(f"anchor: {info['likwid']}; tiers: {' '.join(tiers)}")
    print(f"array {args.array_bytes} B (copy working set {2 * args.array_bytes} B, triad "
          f"{3 * args.array_bytes} B); {args.ntimes} repetitions/iterations; {args.rounds} rounds; "
          f"tiers --pin compact --placement {args.placement}, likwid "
          f"{'-W' if args.placement == 'first-touch' else '-w'} S0:SIZE:THREADS")
    if llc:
        print(f"last-level cache {llc / 2**20:,.0f} MiB: each array is "
              f"{args.array_bytes / llc:.1f}x it" + ("" if args.array_bytes >= 4 * llc else
                                                     " (below STREAM's 4x rule)"))
    print("likwid variants: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in variants.items()))

    # samples[(tool, kernel, threads)] -> list of (best, mean) or rate
    samples: dict[tuple, list] = {}
    broken: dict[str, str] = {}
    default_stores = None
    total = args.rounds * len(threads)
    step = 0
    for rnd in range(args.rounds):
        for t in threads:
            step += 1
            print(f"round {rnd + 1}/{args.rounds}, {t} thread(s) ... ", end="", file=sys.stderr,
                  flush=True)
            # Alternate: likwid copy variants, tiers (auto: both store kinds side by
            # side, each kernel reporting the faster on the mean), likwid stream
            # variants; even rounds start with tiers.
            order = [("likwid", "copy"), ("tiers", "auto"), ("likwid", "triad")]
            if rnd % 2 == 0:
                order = [order[1], order[0], order[2]]
            for tool, what in order:
                if tool == "tiers":
                    out = run_tiers(tiers, what, t, args.array_bytes, args.ntimes, args.placement)
                    default_stores = out["params"].get("default_stores")
                    for kind, by_kernel in out["rates"].items():
                        for k, rate in by_kernel.items():
                            samples.setdefault((f"tiers {kind}", k, t), []).append(rate)
                else:
                    arrays = KERNELS[what][1]
                    for v in list(variants[what]):
                        r = run_likwid(v, arrays * args.array_bytes, t, args.ntimes,
                                       args.placement == "first-touch")
                        if isinstance(r, str):  # a broken variant leaves the comparison
                            broken[v] = r
                            variants[what].remove(v)
                            for tt in threads:
                                samples.pop((v, what, tt), None)
                            continue
                        samples.setdefault((v, what, t), []).append(r)
            print(f"done ({step}/{total})", file=sys.stderr)

    report(samples, variants, broken, threads, default_stores, info, args)
    return 0


def report(samples: dict, variants: dict, broken: dict, threads: list[int],
           default_stores, info: dict, args) -> None:
    """Print the medians, the ratio table and the spread over the rounds;
    write the JSON document when asked."""
    med = {}
    for key, vals in samples.items():
        if key[0].startswith("tiers"):
            med[key] = (statistics.median(v[0] for v in vals),
                        statistics.median(v[1] for v in vals))
        else:
            med[key] = statistics.median(vals)

    print()
    print("Medians, MB/s (10^6 B/s).  likwid: mean over its iterations; tiers: mean "
          "(bytes/avg time) and, in brackets, STREAM's best rate.")
    cols = [(k, t) for k in KERNELS for t in threads]
    head = f"{'variant':<22}" + "".join(f"{k + ' ' + str(t) + 't':>22}" for k, t in cols)
    print(head)
    print("-" * len(head))
    for tool in ("tiers auto", "tiers regular", "tiers nt"):
        row = f"{tool:<22}"
        for k, t in cols:
            best, mean = med[(tool, k, t)]
            row += f"{mean:>12,.0f} ({best:>7,.0f})"
        print(row)
    for k in KERNELS:
        for v in variants[k]:
            row = f"{v:<22}"
            for kk, t in cols:
                row += f"{med[(v, k, t)]:>22,.0f}" if kk == k else f"{'':>22}"
            print(row)

    for v, why in broken.items():
        print(f"{v:<22}excluded: likwid-bench failed ({why})")

    print()
    print(f"Ratio of tiers to likwid's best variant (target >= {TARGET} at 1 and 2 threads); "
          f"tiers' default stores: {default_stores}")
    head = (f"{'kernel':<7}{'thr':>4}  {'likwid best':<28}{'likwid best regular':<28}"
            f"{'likwid best _mem (NT)':<28}{'auto':>7}{'auto best':>10}{'tiers reg':>10}"
            f"{'tiers nt':>10}{'reg/reg':>9}{'nt/nt':>8}{'nt/512':>8}  target")
    print("(auto: tiers' default, each kernel's faster store variant: its mean rate over likwid's "
          "best variant; auto best: its STREAM best rate over it;\n tiers reg / tiers nt: each "
          "variant's mean rate over likwid's best; reg/reg and nt/nt: tiers regular over "
          "likwid's best regular variant, tiers nt over likwid's best _mem variant; nt/512: "
          "tiers nt over likwid's AVX-512 non-temporal variant alone, the same method with no "
          "pick among variants (a best of several noisy medians leans high);\n the target "
          "holds when auto and auto best both reach it)")
    print(head)
    print("-" * len(head))
    table = []
    for k in KERNELS:
        for t in threads:
            rates = {v: med[(v, k, t)] for v in variants[k]}
            if not rates:
                print(f"{k:<7}{t:>4}  no likwid variant ran")
                continue
            best_v = max(rates, key=rates.get)
            reg = {v: r for v, r in rates.items() if "_mem" not in v}
            nt = {v: r for v, r in rates.items() if "_mem" in v}
            reg_v = max(reg, key=reg.get) if reg else None
            nt_v = max(nt, key=nt.get) if nt else None
            lw = rates[best_v]
            t_reg = med[("tiers regular", k, t)][1] / lw
            t_nt = med[("tiers nt", k, t)][1] / lw
            t_auto = med[("tiers auto", k, t)][1] / lw
            t_auto_best = med[("tiers auto", k, t)][0] / lw
            reg_reg = med[("tiers regular", k, t)][1] / reg[reg_v] if reg_v else float("nan")
            nt_nt = med[("tiers nt", k, t)][1] / nt[nt_v] if nt_v else float("nan")
            same = f"{KERNELS[k][0]}_mem_avx512"
            nt_512 = (med[("tiers nt", k, t)][1] / rates[same] if same in rates
                      else float("nan"))
            met = min(t_auto, t_auto_best) >= TARGET
            ok = "met" if met else "MISSED"

            def cell(v, r):
                return f"{v} {r:,.0f}" if v else "-"

            print(f"{k:<7}{t:>4}  {cell(best_v, lw):<28}"
                  f"{cell(reg_v, reg.get(reg_v, 0)):<28}{cell(nt_v, nt.get(nt_v, 0)):<28}"
                  f"{t_auto:>7.3f}{t_auto_best:>10.3f}{t_reg:>10.3f}{t_nt:>10.3f}{reg_reg:>9.3f}"
                  f"{nt_nt:>8.3f}{nt_512:>8.3f}  {ok}")
            table.append({"kernel": k, "threads": t, "likwid_best_variant": best_v,
                          "likwid_best_mbps": lw, "likwid_best_regular": reg_v,
                          "likwid_best_nt": nt_v, "ratio_tiers_regular_mean": t_reg,
                          "ratio_tiers_nt_mean": t_nt, "ratio_tiers_auto_mean": t_auto,
                          "ratio_tiers_auto_best": t_auto_best,
                          "ratio_regular_to_likwid_regular": reg_reg,
                          "ratio_nt_to_likwid_nt": nt_nt,
                          "ratio_nt_to_likwid_mem_avx512": nt_512,
                          "target_met_default": met})
    print()
    print("Spread over the rounds: (max - min) / median of each side's rate, and tiers' "
          "mean rate over likwid's best variant round by round (median, min-max)")
    head = (f"{'kernel':<7}{'thr':>4}{'rounds':>8}{'tiers auto':>12}{'likwid best':>13}"
            f"{'ratio median':>14}{'min-max':>16}")
    print(head)
    print("-" * len(head))
    for row in table:
        k, t, best_v = row["kernel"], row["threads"], row["likwid_best_variant"]
        ours = [v[1] for v in samples[("tiers auto", k, t)]]
        theirs = samples[(best_v, k, t)]
        per_round = [a / b for a, b in zip(ours, theirs)]
        row["spread_tiers_auto_mean"] = spread_of(ours)
        row["spread_likwid_best"] = spread_of(theirs)
        row["ratio_per_round"] = per_round
        print(f"{k:<7}{t:>4}{len(per_round):>8}{spread_of(ours):>11.1%}"
              f"{spread_of(theirs):>13.1%}{statistics.median(per_round):>14.3f}"
              f"{min(per_round):>9.3f}-{max(per_round):.3f}")
    if args.json:
        raw = {"machine": info, "args": vars(args), "default_stores": default_stores,
               "likwid_failed": broken,
               "samples": [{"tool": a, "kernel": b, "threads": c, "values": v}
                           for (a, b, c), v in samples.items()],
               "ratios": table}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(raw, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
