# Fixed costs on a GPU host, each in a new process: NVML's arch query (the WARMKEY_ARCH_PROBE path) vs cuInit,
# and the exit of a process holding CUDA's primary context: libc's exit() (atexit handlers, libcuda's
# teardown of the context included) against _exit() (the kernel releases the device files), each
# measured from just before the call to the parent's wait returning (CLOCK_MONOTONIC in both).
# Usage: python3 bench/driver_init_costs.py
import subprocess, sys, time
NVML = r'''
import ctypes, time
t0 = time.perf_counter(); l = ctypes.CDLL("libnvidia-ml.so.1"); t1 = time.perf_counter()
r = l.nvmlInit_v2(); t2 = time.perf_counter()
n = ctypes.c_uint(); l.nvmlDeviceGetCount_v2(ctypes.byref(n)); caps = []
for i in range(n.value):
    h = ctypes.c_void_p(); l.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
    a = ctypes.c_int(); b = ctypes.c_int(); l.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(a), ctypes.byref(b)); caps.append((a.value, b.value))
t3 = time.perf_counter(); l.nvmlShutdown(); t4 = time.perf_counter()
print(f"nvml: dlopen {1e3*(t1-t0):.1f} ms, nvmlInit_v2 {1e3*(t2-t1):.1f} ms (rc {r}), count+caps {1e3*(t3-t2):.1f} ms, shutdown {1e3*(t4-t3):.1f} ms, caps {caps}")
'''
CUDA = r'''
import ctypes, time
t0 = time.perf_counter(); l = ctypes.CDLL("libcuda.so.1"); t1 = time.perf_counter()
r = l.cuInit(0); t2 = time.perf_counter()
print(f"cuda: dlopen {1e3*(t1-t0):.1f} ms, cuInit {1e3*(t2-t1):.1f} ms (rc {r})")
'''
for i in range(3):
    for code in (NVML, CUDA):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        print((p.stdout + p.stderr).strip())

EXIT = r'''
import ctypes, sys, time
libc = ctypes.CDLL(None)
ctx = ctypes.c_void_p(); ptr = ctypes.c_uint64()
if sys.argv[2] == "context":  # a 64 MiB buffer in the primary context, as a warmup's process holds one
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    dev = ctypes.c_int(); assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 26)) == 0
print(time.monotonic(), flush=True)
(libc.exit if sys.argv[1] == "exit" else libc._exit)(0)
'''
for i in range(3):
    for how in ("exit", "_exit"):
        for what in ("context", "none"):
            p = subprocess.Popen([sys.executable, "-c", EXIT, how, what], stdout=subprocess.PIPE, text=True)
            out = p.stdout.read()
            p.wait()
            end = time.monotonic()
            try:
                print(f"exit: {how:5s} with {what:7s}: {1e3 * (end - float(out.split()[0])):.1f} ms from the call to the parent's wait")
            except (ValueError, IndexError):
                print(f"exit: {how} with {what}: no timestamp (rc {p.returncode})")
