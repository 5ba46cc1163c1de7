# Fixed costs on a GPU host, each in a new process: NVML's arch query (the WARMKEY_ARCH_PROBE path) vs cuInit.
# Usage: python3 bench/driver_init_costs.py
import subprocess, sys
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
