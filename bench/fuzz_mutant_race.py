#!/usr/bin/env python3
"""How soon does a harness find a planted bug? Runs libFuzzer harnesses from several builds on
seeded mutants (WARMKEY_FUZZ_MUTANT) from an empty corpus, and prints the executions and CPU
seconds each took to its first finding.

  bench/fuzz_mutant_race.py --build NAME=DIR [--build NAME=DIR ...] --mutant KERNEL.MUTANT [...]
                            [--seeds 1,2,3] [--max-runs 200000] [--max-time 120] [--corpus seed|empty]

DIR holds <kernel>_fuzzer binaries (a build's fuzz/ folder); two names may share a DIR with
different libFuzzer arguments (--extra NAME=ARGS). For each mutant, seed and build (the
builds alternate, so machine load falls on all alike) the harness runs with -seed=S -runs=MAX
-print_final_stats=1 on a fresh empty corpus folder (plus fuzz/corpus/<kernel> with --corpus seed);
a finding is the harness's abort on a violated property. Prints one row per run and, per build,
the median executions and CPU seconds to a finding and the number of mutants never found.
Throughput figures come from the same runs: executions / CPU seconds of the process.
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
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_one(binary, mutant, seed, max_runs, max_time, corpus_mode, extra=()):
    kernel = mutant.split(".", 1)[0]
    work = tempfile.mkdtemp(prefix="warmkey-race-")
    try:
        corpus = os.path.join(work, "corpus")
        os.makedirs(corpus)
        args = [binary, f"-seed={seed}", f"-runs={max_runs}", f"-max_total_time={max_time}", "-print_final_stats=1",
                "-timeout=20", f"-artifact_prefix={work}/", *extra, corpus]
        if corpus_mode == "seed":
            args.append(os.path.join(ROOT, "fuzz", "corpus", kernel))
        env = dict(os.environ, WARMKEY_FUZZ_MUTANT=mutant)
        env.pop("WARMKEY_FUZZ_REPORT", None)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        p = subprocess.run(args, capture_output=True, text=True, env=env)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        out = p.stderr
        found = "property violated" in out
        m = re.findall(r"stat::number_of_executed_units:\s*(\d+)", out)
        execs = int(m[-1]) if m else None
        prop = re.search(r"\b(P[1-7]|GEN)\b", out.split("property violated", 1)[1]) if found else None
        return {"found": found, "execs": execs, "cpu": cpu, "wall": wall, "property": prop.group(1) if prop else "",
                "rc": p.returncode}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--extra", action="append", default=[],
                    help="NAME=ARGS: libFuzzer arguments for build NAME's runs only (e.g. all_e0=-entropic=0)")
    ap.add_argument("--build", action="append", required=True, help="NAME=DIR with <kernel>_fuzzer binaries")
    ap.add_argument("--mutant", action="append", required=True, help="KERNEL.MUTANT (a seeded mutant's name)")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--max-runs", type=int, default=200000)
    ap.add_argument("--max-time", type=int, default=120)
    ap.add_argument("--corpus", choices=("empty", "seed"), default="empty")
    a = ap.parse_args()
    builds = []
    for b in a.build:
        name, _, d = b.partition("=")
        builds.append((name, d))
    extra = {n: v.split() for n, _, v in (e.partition("=") for e in a.extra)}
    seeds = [int(s) for s in a.seeds.split(",")]
    rows = {name: [] for name, _ in builds}
    print(f"{'mutant':52} {'seed':>4} {'build':12} {'found':>5} {'prop':>4} {'execs':>9} {'cpu s':>7} {'exec/cpu-s':>10}")
    flip = False
    for mutant in a.mutant:
        kernel = mutant.split(".", 1)[0]
        for seed in seeds:
            order = builds[::-1] if flip else builds
            flip = not flip
            for name, d in order:
                binary = os.path.join(d, f"{kernel}_fuzzer")
                r = run_one(binary, mutant, seed, a.max_runs, a.max_time, a.corpus, extra.get(name, ()))
                r.update(mutant=mutant, seed=seed)
                rows[name].append(r)
                rate = f"{r['execs'] / r['cpu']:.0f}" if r["execs"] and r["cpu"] > 0 else "-"
                print(f"{mutant:52} {seed:>4} {name:12} {'yes' if r['found'] else 'no':>5} {r['property']:>4} "
                      f"{r['execs'] if r['execs'] is not None else '-':>9} {r['cpu']:7.2f} {rate:>10}", flush=True)
    print()
    print(f"{'build':12} {'runs':>4} {'found':>5} {'median execs to finding':>24} {'median cpu s':>12} "
          f"{'exec/cpu-s (all runs)':>22}")
    for name, _ in builds:
        rs = rows[name]
        hit = [r for r in rs if r["found"]]
        ex = [r["execs"] for r in hit if r["execs"] is not None]
        total_execs = sum(r["execs"] or 0 for r in rs)
        total_cpu = sum(r["cpu"] for r in rs)
        print(f"{name:12} {len(rs):>4} {len(hit):>5} {statistics.median(ex) if ex else '-':>24} "
              f"{statistics.median([r['cpu'] for r in hit]) if hit else '-':>12} "
              f"{total_execs / total_cpu if total_cpu else 0:>22.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
