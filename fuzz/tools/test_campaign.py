#!/usr/bin/env python3
"""ctest fuzz.campaign: ci/fuzz-campaign on a planted bug and on the real kernel.

  test_campaign.py <bin-dir> <source-dir> <scratch-dir>
  test_campaign.py --any-binary <warmkey_fuzz_any> <source-dir> <scratch-dir>

The second form runs the campaigns and the replays on the one binary that serves every kernel
($WARMKEY_FUZZ_KERNEL; the asan-ubsan preset builds only that one).

1. A tiny campaign against moe_align with the seeded mutant moe_align.warmup_one_token planted
   (WARMKEY_FUZZ_MUTANT): it must report a P1 (or P2) finding, write a minimised regression input and its
   report (with the reproduce line) under the scratch regressions folder, and the regression must
   make the planted harness fail when replayed alone.
2. The same campaign on the real kernel: no finding, executions counted, exit status 0, and the new
   corpus entries merged into the scratch corpus only.
Writes nothing into the source tree.
"""
import json
import os
import shutil
import subprocess
import sys


def campaign(tool, bin_dir, scratch, name, env, *extra):
    work = os.path.join(scratch, name)
    shutil.rmtree(work, ignore_errors=True)
    corpus = os.path.join(work, "corpus")
    shutil.copytree(os.path.join(SOURCE, "fuzz", "corpus", "moe_align"), os.path.join(corpus, "moe_align"))
    harnesses = ["--any-binary", ANY_BINARY] if ANY_BINARY else ["--bin-dir", bin_dir]
    cmd = [sys.executable, tool, *harnesses, "--runs", "3000", "--workers", "1", "--out",
           os.path.join(work, "out"), "--corpus", corpus, "--regressions", os.path.join(work, "regressions"),
           "--minimize-time", "5", "--max-restarts", "0", "--json", "--quiet", *extra, "moe_align"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    try:
        summary = json.loads(p.stdout)
    except json.JSONDecodeError:
        sys.exit(f"{name}: no JSON summary (exit {p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.returncode, summary, work


def check(cond, msg):
    if not cond:
        sys.exit("FAILED: " + msg)


args = sys.argv[1:]
ANY_BINARY = None
if args and args[0] == "--any-binary":
    ANY_BINARY = args[1]
    args = ["", *args[2:]]
bin_dir, SOURCE, scratch = args[0:3]
tool = os.path.join(SOURCE, "ci", "fuzz-campaign")
os.makedirs(scratch, exist_ok=True)
base_env = {k: v for k, v in os.environ.items() if k not in ("WARMKEY_FUZZ_MUTANT", "WARMKEY_FUZZ_REPORT")}

# 1. planted mutant
env = dict(base_env, WARMKEY_FUZZ_MUTANT="moe_align.warmup_one_token")
rc, s, work = campaign(tool, bin_dir, scratch, "planted", env)
check(rc == 1, f"planted: exit {rc}, expected 1 (findings)")
check(len(s["findings"]) >= 1, "planted: no finding")
f = s["findings"][0]
# The mutant breaks P1 (warmup inputs of one token dispatch elsewhere); the same inputs' binaries are
# then not warmed either, so an input's own P2 may be the first violation reported.
check(f["property"] in ("P1", "P2"), f"planted: property {f['property']}, expected P1 or P2")
check(os.path.isfile(f["regression"]), f"planted: no regression file {f['regression']}")
check(os.path.dirname(f["regression"]) == os.path.join(work, "regressions", "moe_align"),
      f"planted: regression outside the kernel's folder: {f['regression']}")
report = open(f["report"]).read()
for needle in ("reproduce:", f["property"], "moe_align", "JitKey"):
    check(needle in report, f"planted: report lacks '{needle}':\n{report}")
check(f["violation"] and f["violation"]["kernel"] == "moe_align", "planted: no violation JSON")
# The regression replays as a failure under the mutant, and passes under the real kernel (as
# FuzzRegressions replays it).
harness = ANY_BINARY or os.path.join(bin_dir, "moe_align_fuzzer")
kernel = {"WARMKEY_FUZZ_KERNEL": "moe_align"} if ANY_BINARY else {}
bad = subprocess.run([harness, "-runs=1", f["regression"]], capture_output=True, env=dict(env, **kernel))
check(bad.returncode != 0, "planted: the regression input does not fail under the mutant")
good = subprocess.run([harness, "-runs=1", f["regression"]], capture_output=True, env=dict(base_env, **kernel))
check(good.returncode == 0, "planted: the regression input fails under the real kernel")

# 2. the real kernel
rc, s, work = campaign(tool, bin_dir, scratch, "clean", base_env)
check(rc == 0, f"clean: exit {rc}:\n{json.dumps(s, indent=1)}")
check(not s["findings"], "clean: findings on the real kernel")
check(s["executions"] >= 3000, f"clean: {s['executions']} executions, expected >= 3000")
row = s["harnesses"][0]
check(row["harness"] == "moe_align" and row["cov"] > 0 and row["ft"] > 0, f"clean: no coverage in {row}")
check(not os.path.exists(os.path.join(work, "regressions")), "clean: wrote a regressions folder")
print("fuzz.campaign: planted finding recorded and replayed; clean run found nothing "
      f"({s['executions']} executions, cov {row['cov']}, {row['corpus_added']} corpus entries merged)")
shutil.rmtree(scratch, ignore_errors=True)
