"""The CUDA backend's device compiler: CUDA C to a cubin with NVRTC, the resources ptxas reports
for each kernel, and the checks of those against a ``GpuTarget`` (``nvrtc.py``; docs/gpu.md).
NVRTC and its ptxas need no GPU and no driver, so this runs, and is tested, on any machine with
the ``tensorforge[cuda]`` wheels; running the cubin is ``tensorforge/runtime/cuda.py``'s job."""
