#!/usr/bin/env python3
"""Executions per CPU-second of the libFuzzer harnesses of several builds, interleaved.

  bench/fuzz_throughput.py --build NAME=DIR [--build NAME=DIR ...] [--runs 20000] [--rounds 2]
                           [--kernel K ...] [--seed 1]

DIR holds <kernel>_fuzzer binaries (a build's fuzz/ folder); two names may share a DIR with
different libFuzzer arguments (--extra NAME=ARGS). Each run is
`<kernel>_fuzzer -runs=RUNS -seed=SEED -print_final_stats=1 EMPTY_DIR fuzz/corpus/<kernel>`: the
seed corpus loaded, then RUNS executions in all (corpus loading counted). exec per CPU-second =
RUNS / (user + sys) of the process, the method of docs/PERFORMANCE.md's fuzzing passes. Rounds
alternate the order of the builds (A B, then B A, ...) so machine load falls on each alike.
Prints every run, then per kernel the median of each build, its ratio to the first build, peak
RSS and libFuzzer's cov / ft at the end.
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kernels_of(d):
    return sorted(f[: -len("_fuzzer")] for f in os.listdir(d) if f.endswith("_fuzzer"))


def run(binary, kernel, runs, seed, extra=()):
    work = tempfile.mkdtemp(prefix="warmkey-tp-")
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run([binary, f"-runs={runs}", f"-seed={seed}", "-print_final_stats=1", *extra, work,
                            os.path.join(ROOT, "fuzz", "corpus", kernel)], capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        sys.exit(f"{binary}: exit {p.returncode}\n{p.stderr[-2000:]}")
    cov = re.findall(r"cov: (\d+) ft: (\d+)", p.stderr)
    rss = re.search(r"stat::peak_rss_mb:\s*(\d+)", p.stderr)
    return {"rate": runs / cpu, "cpu": cpu, "cov": cov[-1] if cov else ("-", "-"),
            "rss": int(rss.group(1)) if rss else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--extra", action="append", default=[],
                    help="NAME=ARGS: libFuzzer arguments for build NAME's runs only (e.g. all_e0=-entropic=0)")
    ap.add_argument("--build", action="append", required=True)
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kernel", action="append")
    a = ap.parse_args()
    builds = [tuple(b.split("=", 1)) for b in a.build]
    extra = {n: v.split() for n, _, v in (e.partition("=") for e in a.extra)}
    kernels = a.kernel or kernels_of(builds[0][1])
    res = {(k, n): [] for k in kernels for n, _ in builds}
    for r in range(a.rounds):
        order = builds if r % 2 == 0 else builds[::-1]
        for k in kernels:
            for n, d in order:
                x = run(os.path.join(d, f"{k}_fuzzer"), k, a.runs, a.seed, extra.get(n, ()))
                res[(k, n)].append(x)
                load = os.getloadavg()[0]
                print(f"round {r + 1} {k:22} {n:10} {x['rate']:8.0f} exec/cpu-s  cpu {x['cpu']:6.2f}s  "
                      f"rss {x['rss']:4d} MB  cov {x['cov'][0]} ft {x['cov'][1]}  load {load:.1f}", flush=True)
    print()
    head = f"{'harness':22}" + "".join(f" {n:>10}" for n, _ in builds) + "".join(
        f" {n + '/' + builds[0][0]:>14}" for n, _ in builds[1:]) + "  peak RSS MB  cov / ft"
    print(head)
    for k in kernels:
        med = {n: statistics.median(x["rate"] for x in res[(k, n)]) for n, _ in builds}
        line = f"{k:22}" + "".join(f" {med[n]:10.0f}" for n, _ in builds)
        line += "".join(f" {med[n] / med[builds[0][0]]:13.2f}x" for n, _ in builds[1:])
        line += "  " + " / ".join(str(res[(k, n)][-1]["rss"]) for n, _ in builds)
        line += "  " + " | ".join(f"{res[(k, n)][-1]['cov'][0]}/{res[(k, n)][-1]['cov'][1]}" for n, _ in builds)
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
