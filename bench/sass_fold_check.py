#!/usr/bin/env python3
"""Key-level folding, checked on the machine code (docs/PERFORMANCE.md, "Key-level folding").

Reads the cubins `nvrtc_breakdown --batch 1 --dump DIR` writes (one program per JIT key:
<kernel>_0_<i>.cubin and its .names line "<lowered name> <JitKey signature>") and compares their
machine code (see machine_code: the SASS bytes and the kernel's attributes) with the generated Spec
struct's name masked (k_<hex>: it differs per JitKey).

  sass_fold_check.py candidates DIR KERNEL:PARAM...
      Groups DIR's keys as if PARAM lost its 'D' value class (what do_not_specialize_on_alignment
      does) and says, per kernel, whether every group holds a single SASS: the fold is code-neutral.
  sass_fold_check.py compare BEFORE AFTER [KERNEL:PARAM...]
      BEFORE dumped by a build without the folds, AFTER by one with them (nvrtc_breakdown compiles
      each JIT key once): every compile key of BEFORE against the program AFTER compiles for its
      folded JIT key. Exit 1 unless all have the same machine code.
"""
import argparse
import collections
import hashlib
import re
import struct
import sys
from pathlib import Path

STRUCT = re.compile(rb"k_[0-9a-f]{8,}")
DEBUG = (b".debug", b".nv_debug", b".rela.debug", b".rela.nv_debug", b".note")


def programs(dump_dir, kernel=None):
    """{kernel: [(index, cubin path, signature)]} in plan order."""
    out = collections.defaultdict(list)
    for cubin in Path(dump_dir).glob("*_0_*.cubin"):
        name, _, idx = cubin.stem.rpartition("_0_")
        if kernel and name not in kernel:
            continue
        sig = cubin.with_suffix(".cubin.names").read_text().split(" ", 1)[1].strip()
        out[name].append((int(idx), cubin, sig))
    for v in out.values():
        v.sort()
    return out


def elf_sections(path):
    """[(name, type, flags, info, size, body)] of a 64-bit little-endian ELF (a cubin)."""
    d = Path(path).read_bytes()
    (shoff,) = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    names = hdrs[shstrndx][4]
    out = []
    for name_off, typ, flags, _, off, size, _, info, _, _ in hdrs:
        name = d[names + name_off : d.index(b"\0", names + name_off)]
        out.append((name, typ, flags, info, size, d[off : off + size] if typ != 8 else b""))  # 8: NOBITS
    return out


def machine_code(cubin, cache={}):
    """Digest of what runs: every section but the name tables, debug info and notes, with the Spec
    struct's name masked: the SASS (.text.*), its attributes (.nv.info*: registers, parameters,
    barriers), shared and constant banks, relocations. The Spec's own globals (.nv.global*, its
    static constexpr members) count only when the code has a relocation, i.e. reads a global."""
    if cubin not in cache:
        secs = elf_sections(cubin)
        reads_globals = any(n.startswith(b".rela.text") and size for n, _, _, _, size, _ in secs)
        h = hashlib.sha256()
        for name, typ, flags, info, size, body in secs:
            if name in (b"", b".shstrtab", b".strtab", b".symtab") or name.startswith(DEBUG):
                continue
            if name.startswith(b".nv.global") and not reads_globals:
                continue
            h.update(repr((STRUCT.sub(b"k_X", name), typ, flags, info, size)).encode())
            h.update(STRUCT.sub(b"k_X", body))
        cache[cubin] = h.hexdigest()[:16]
    return cache[cubin]


def fold_sig(sig, params):
    for p in params:
        sig = re.sub(rf"\b{p}:(i32|i64|u64):D\b", rf"{p}:\1", sig)
    return sig


def candidates(args):
    want = collections.defaultdict(list)
    for kp in args.folds:
        k, p = kp.split(":")
        want[k].append(p)
    ok = True
    for kernel, progs in sorted(programs(args.dir, list(want)).items()):
        sass = {i: machine_code(c) for i, c, _ in progs}
        groups = collections.defaultdict(set)
        for i, _, sig in progs:
            groups[fold_sig(sig, want[kernel])].add(sass[i])
        mixed = [g for g, s in groups.items() if len(s) > 1]
        ok &= not mixed
        print(f"{kernel}: {len(progs)} keys, {len(set(sass.values()))} distinct SASS, "
              f"{len(groups)} JIT keys folding {','.join(want[kernel])}: "
              f"{'code-neutral' if not mixed else f'{len(mixed)} groups hold different SASS'}")
        for g in mixed:
            print(f"  differs: {g}")
    return 0 if ok else 1


def compare(args):
    """Each compile key of BEFORE (one program per compile key, plan order) against the program of
    AFTER (one per JIT key) whose signature is BEFORE's with the folded classes dropped."""
    want = collections.defaultdict(list)
    for kp in args.folds:
        k, p = kp.split(":")
        want[k].append(p)
    before, after = programs(args.before), programs(args.after)
    bad = 0
    for kernel in sorted(before):
        by_sig = {sig: c for _, c, sig in after.get(kernel, [])}
        same = missing = 0
        for _, cb, sig in before[kernel]:
            ca = by_sig.get(fold_sig(sig, want[kernel]))
            if ca is None:
                missing += 1
                print(f"  {kernel}: no program after for {fold_sig(sig, want[kernel])}")
            elif machine_code(cb) == machine_code(ca):
                same += 1
            else:
                print(f"  {kernel}: other code after for {sig}")
        n = len(before[kernel])
        print(f"{kernel}: {n} compile keys; JIT keys {len({s for _, _, s in before[kernel]})} before, "
              f"{len(by_sig)} after; compile keys whose code after is the same as before: {same}/{n}")
        bad += n - same
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("candidates")
    c.add_argument("dir")
    c.add_argument("folds", nargs="+")
    m = sub.add_parser("compare")
    m.add_argument("before")
    m.add_argument("after")
    m.add_argument("folds", nargs="*", help="KERNEL:PARAM whose 'D' class AFTER folded")
    args = ap.parse_args()
    return candidates(args) if args.cmd == "candidates" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
