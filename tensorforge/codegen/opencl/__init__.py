"""The OpenCL backend: its spelling of GPU kernels (``language.py``); programs are built and run by
``runtime/opencl.py`` (pyopencl), on any OpenCL driver (PoCL runs them on a CPU)."""
