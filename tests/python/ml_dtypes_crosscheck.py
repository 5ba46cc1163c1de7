#!/usr/bin/env python3
"""Cross-checks warmkey's host codecs of e2m1 (NVFP4 elements) and fp8 e4m3 (NVFP4 block scales)
with ml_dtypes' float4_e2m1fn and float8_e4m3fn, and of bf16 and f16 (the activations and outputs
nvfp4_moe's reference reads and rounds to) with ml_dtypes' bfloat16 and numpy's float16, independent
implementations: every code decoded, every value and midpoint encoded, and a seeded random sample
encoded.

Usage: ml_dtypes_crosscheck.py <codec_dump binary> [seed] [samples]
Exit status: 0 all agree, 1 a mismatch, 77 ml_dtypes (or numpy) is not installed (ctest: Skipped).
"""
import struct
import subprocess
import sys

SKIP = 77

try:
    import numpy as np
    import ml_dtypes
except ImportError as e:  # the test reports Skipped, never passed
    print(f"ml_dtypes cross-check skipped: {e} (pip install ml_dtypes)")
    sys.exit(SKIP)


def as_float(hex_bits):
    return struct.unpack("<f", struct.pack("<I", int(hex_bits, 16)))[0]


def same(a, b):
    return (np.isnan(a) and np.isnan(b)) or (a == b and np.signbit(a) == np.signbit(b))


def main():
    dump = subprocess.run(sys.argv[1:], check=True, capture_output=True, text=True).stdout.splitlines()
    f4, f8 = ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e4m3fn
    counts = {}
    bad = []
    for line in dump:
        what, a, b = line.split()
        if what.endswith("_bf16") or what.endswith("_f16"):
            continue  # compared in bulk below
        counts[what] = counts.get(what, 0) + 1
        if what in ("dec_e2m1", "dec_e4m3"):
            code, got = int(a), as_float(b)
            dtype = f4 if what == "dec_e2m1" else f8
            want = float(np.array([code], dtype=np.uint8).view(dtype).astype(np.float32)[0])
            if not same(got, want):
                bad.append(f"{what} code {code}: warmkey {got!r}, ml_dtypes {want!r}")
        elif what in ("enc_e2m1", "enc_e4m3"):
            v, got = as_float(a), int(b)
            dtype = f4 if what == "enc_e2m1" else f8
            want = int(np.array([v], dtype=np.float32).astype(dtype).view(np.uint8)[0])
            if what == "enc_e2m1":
                want &= 0xF
            if got != want:
                bad.append(f"{what} {v!r}: warmkey code {got:#x}, ml_dtypes code {want:#x}")
        elif what == "pack_e2m1":
            # 1.5 -> 0x3, -4 -> 0xe, 0.5 -> 0x1: element 2j in the low nibble.
            vals = np.array([1.5, -4.0, 0.5], dtype=np.float32).astype(f4).view(np.uint8) & 0xF
            want = [int(vals[0] | (vals[1] << 4)), int(vals[2])]
            if [int(a), int(b)] != want:
                bad.append(f"pack_e2m1: warmkey {[int(a), int(b)]}, expected {want}")
    # bf16 / f16: compared in bulk (65536 codes and the samples each).
    halves = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
    for name, dtype in halves.items():
        dec = [(int(a), int(b, 16)) for what, a, b in (l.split() for l in dump) if what == "dec_" + name]
        enc = [(int(a, 16), int(b)) for what, a, b in (l.split() for l in dump) if what == "enc_" + name]
        counts["dec_" + name], counts["enc_" + name] = len(dec), len(enc)
        if dec:
            codes = np.array([c for c, _ in dec], dtype=np.uint16)
            got = np.array([g for _, g in dec], dtype=np.uint32).view(np.float32)
            want = codes.view(dtype).astype(np.float32)
            ok = (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))
            for i in np.flatnonzero(~ok)[:20]:
                bad.append(f"dec_{name} code {int(codes[i])}: warmkey {float(got[i])!r}, reference {float(want[i])!r}")
        if enc:
            vals = np.array([v for v, _ in enc], dtype=np.uint32).view(np.float32)
            got = np.array([g for _, g in enc], dtype=np.uint32)
            with np.errstate(over="ignore"):  # overflow to infinity is part of the check
                want = vals.astype(dtype).view(np.uint16).astype(np.uint32)
            for i in np.flatnonzero(got != want)[:20]:
                bad.append(f"enc_{name} {float(vals[i])!r}: warmkey code {int(got[i]):#x}, reference code {int(want[i]):#x}")
    print("compared with ml_dtypes " + ml_dtypes.__version__ + ": " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for line in bad[:20]:
        print("MISMATCH " + line)
    if bad:
        print(f"{len(bad)} mismatches")
        return 1
    if (counts.get("dec_e2m1") != 16 or counts.get("dec_e4m3") != 256 or counts.get("dec_bf16") != 65536 or
            counts.get("dec_f16") != 65536):
        print("the dump did not list every code")
        return 1
    print("all agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
