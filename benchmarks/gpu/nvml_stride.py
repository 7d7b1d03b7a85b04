import ctypes, subprocess, sys, time, pynvml as nv
from services.worker.profiler import nvml_pids as P
busy = [subprocess.Popen([sys.executable, "-c", "import torch,time; x=torch.ones(1,device='cuda'); time.sleep(20)"]) for _ in range(3)]
time.sleep(8)
nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(0)
print("nvidia-ml-py record", ctypes.sizeof(nv.c_nvmlProcessInfo_t), "driver", nv.nvmlSystemGetDriverVersion())
fn = nv._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
c = ctypes.c_uint(64); buf = ctypes.create_string_buffer(b"\xaa" * 4096)
print("ret", fn(h, ctypes.byref(c), buf), "count", c.value, "written", len(buf.raw[:4096].rstrip(b"\xaa")))
print("ours", [pid for pid, _ in P.compute_processes(nv, h)], "pids", [b.pid for b in busy])
for b in busy: b.kill()
