"""Testing tools: the differential fuzzer (``python -m tensorforge.testing.fuzz``).

``fuzz_graphs`` builds random valid ONNX graphs, ``fuzz_values`` their inputs (with IEEE special
values), ``fuzz_check`` runs a graph natively, in the reference interpreter and in onnxruntime
and compares, ``fuzz_minimize`` shrinks a failing graph and ``fuzz`` is the driver (batching,
processes, reports, regression tests).  ``digits`` trains the small models of the low-precision
accuracy tests and benchmark, and ``pt2e`` runs PyTorch's PT2E quantization flow for the PT2E tests
and ``benchmarks/pt2e_models.py``.
"""
