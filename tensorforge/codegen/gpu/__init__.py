"""The GPU level shared by the OpenCL and CUDA backends: the program contract, the printer, the
verifier, the race-checking interpreter and the backend that ties them to the driver (docs/gpu.md)."""
