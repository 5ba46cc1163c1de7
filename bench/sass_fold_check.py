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
  sass_fold_check.py compare BEFORE AFTER --keys KEYS_BEFORE KEYS_AFTER [--code-only]
      The same for any fold (a conditional one, KernelDef::fold, included): the JIT key a compile
      key maps to before and after is read from `warmkey keys --config C` of each build. With
      --code-only, only the SASS and the kernel's attribute records count (kernel_code).
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


def eiattr_records(d):
    """The EIATTR records of a .nv.info section: [(attribute, value bytes)]."""
    i, out = 0, []
    while i + 2 <= len(d):
        fmt, attr = d[i], d[i + 1]
        if fmt == 4:  # EIFMT_SVAL: u16 size, then the value
            size = int.from_bytes(d[i + 2 : i + 4], "little")
            out.append((attr, d[i + 4 : i + 4 + size]))
            i += 4 + size
        elif fmt == 3:  # EIFMT_HVAL: u16 value
            out.append((attr, d[i + 2 : i + 4]))
            i += 4
        else:  # EIFMT_NVAL (1) and anything else: no value
            out.append((attr, b""))
            i += 2
    return out


def kernel_code(cubin, cache={}):
    """Digest of the kernel's own code only: the SASS (.text.*) and the kernel's attribute records
    (.nv.info.<kernel>: registers, parameter layout, barriers), with EIATTR_PARAM_CBANK's symbol
    index masked (a symbol number, shifted by any symbol the Spec struct adds or drops). Leaves out
    the Spec's materialised members (.nv.constant*, .nv.global*) that compare's default counts."""
    if cubin not in cache:
        h = hashlib.sha256()
        for name, typ, flags, info, size, body in elf_sections(cubin):
            if name.startswith(b".text"):
                h.update(STRUCT.sub(b"k_X", name) + STRUCT.sub(b"k_X", body))
            elif name.startswith(b".nv.info."):
                for attr, val in eiattr_records(body):
                    if attr == 0x0A and len(val) >= 4:  # EIATTR_PARAM_CBANK: symbol, offset, size
                        val = b"\0\0\0\0" + val[4:]
                    h.update(bytes([attr]) + len(val).to_bytes(2, "little") + val)
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


def key_map(path):
    """{compile key: JitKey signature} from `warmkey keys` output (a compile key line, then its
    '  jit  <signature>  [digest]' line)."""
    out, ck = {}, None
    for line in Path(path).read_text().splitlines():
        if line.startswith("  jit"):
            if ck is not None:
                out[ck] = line.split(None, 1)[1].rsplit("  [", 1)[0].strip()
            ck = None
        elif line and not line.startswith(" "):
            ck = line.strip()
    return out


def compare(args):
    """Each compile key of BEFORE (one program per compile key, plan order) against the program of
    AFTER (one per JIT key) whose signature is BEFORE's with the folded classes dropped."""
    want = collections.defaultdict(list)
    for kp in args.folds:
        k, p = kp.split(":")
        want[k].append(p)
    before, after = programs(args.before), programs(args.after)
    to_after = None
    if args.keys:
        kb, ka = key_map(args.keys[0]), key_map(args.keys[1])
        to_after = collections.defaultdict(set)
        for ck, sig in kb.items():
            if ck in ka:
                to_after[sig].add(ka[ck])
        split = {s: a for s, a in to_after.items() if len(a) > 1}
        if split:
            print(f"a JIT key before maps to {len(split)} JIT keys after (a fold cannot split keys)")
            return 1
        to_after = {s: next(iter(a)) for s, a in to_after.items()}

    def folded(kernel, sig):
        if to_after is not None:
            return to_after.get(sig, "(compile key absent after)")
        return fold_sig(sig, want[kernel])

    code = kernel_code if args.code_only else machine_code
    bad = 0
    for kernel in sorted(before):
        by_sig = {sig: c for _, c, sig in after.get(kernel, [])}
        same = missing = 0
        for _, cb, sig in before[kernel]:
            ca = by_sig.get(folded(kernel, sig))
            if ca is None:
                missing += 1
                print(f"  {kernel}: no program after for {folded(kernel, sig)}")
            elif code(cb) == code(ca):
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
    m.add_argument("--code-only", action="store_true",
                   help="compare the SASS and the kernel's attributes only (kernel_code), not the "
                        "Spec struct's materialised members")
    m.add_argument("--keys", nargs=2, metavar=("KEYS_BEFORE", "KEYS_AFTER"),
                   help="`warmkey keys` output of each build: maps compile keys to JIT keys")
    args = ap.parse_args()
    return candidates(args) if args.cmd == "candidates" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
