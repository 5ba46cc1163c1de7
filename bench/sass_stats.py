# SASS statistics per kernel and option set of dumped cubins (nvrtc_breakdown --dump DIR --set A --set B):
# instructions, local-memory accesses, 128-bit global loads, branches, registers, stack (nvdisasm, cuobjdump).
# Usage: python3 bench/sass_stats.py DIR   (cubins named <kernel>_<set>_<program>.cubin)
# Set 0 is the first --set of the dump (e.g. default), 1 the second (e.g. with -Ofc=min).
import collections, glob, os, re, shutil, subprocess, sys
d = sys.argv[1]
cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
disasm = shutil.which("nvdisasm") or f"{cuda}/bin/nvdisasm"
objdump = shutil.which("cuobjdump") or f"{cuda}/bin/cuobjdump"
if not os.path.exists(disasm): print("no nvdisasm"); sys.exit(0)
agg = collections.defaultdict(lambda: collections.Counter())
for f in sorted(glob.glob(f"{d}/*.cubin")):
    m = re.match(r"(.+)_(\d)_(\d+)\.cubin", os.path.basename(f)); k, s = m.group(1), m.group(2)
    txt = subprocess.run([disasm, "-c", f], capture_output=True, text=True).stdout
    ins = [l for l in txt.splitlines() if re.match(r"\s*/\*[0-9a-f]{4,}\*/\s", l)]
    a = agg[(k, s)]
    a["instr"] += len(ins)
    a["ldl_stl"] += sum(1 for l in ins if re.search(r"\b(LDL|STL)\b", l))
    a["ld128"] += sum(1 for l in ins if re.search(r"\bLDG\.E\.128|\bLDG\.E\.[A-Z.]*128", l))
    a["bra"] += sum(1 for l in ins if re.search(r"\bBRA\b", l))
    if os.path.exists(objdump):
        ru = subprocess.run([objdump, "-res-usage", f], capture_output=True, text=True).stdout
        regs = [int(x) for x in re.findall(r"REG:(\d+)", ru)]
        a["fns"] += len(regs); a["regs_sum"] += sum(regs); a["regs_max"] = max(a["regs_max"], max(regs or [0]))
        a["stack_sum"] += sum(int(x) for x in re.findall(r"STACK:(\d+)", ru))
print(f"{'kernel':22} set {'fns':>4} {'instr':>7} {'LDL/STL':>8} {'LDG128':>7} {'BRA':>6} {'regs_sum':>9} {'regs_max':>8} {'stack':>6}")
for (k, s), a in sorted(agg.items()):
    print(f"{k:22} {s:>3} {a['fns']:>4} {a['instr']:>7} {a['ldl_stl']:>8} {a['ld128']:>7} {a['bra']:>6} {a['regs_sum']:>9} {a['regs_max']:>8} {a['stack_sum']:>6}")
