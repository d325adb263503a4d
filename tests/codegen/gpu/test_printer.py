"""The two GPU printers differ only by their token tables: the same scheduled kernel printed as
OpenCL C and as CUDA C has the same statements once the language's spellings are swapped."""
from __future__ import annotations

import re

from tensorforge.codegen.gpu.printer import LANGUAGES, print_launches
from tensorforge.passes.lower.structured_to_loop import lower_kernel
from tensorforge.schedule.gpu import gpu_schedule

from tests.schedule import kernels


def _body(text: str, language: str) -> list[str]:
    """The statements of a kernel after its signature and parameter setup, in OpenCL spelling."""
    cuda = LANGUAGES["cuda"]
    ocl = LANGUAGES["opencl"]
    lines = text.splitlines()[1:]
    if language == "opencl":
        return [l for l in lines if not re.match(r"\s*__global .*\bp\d+ = \(__global", l)]
    out = []
    for line in lines:
        for axis, n in (("x", 0), ("y", 1), ("z", 2)):
            line = line.replace(cuda.block_index.format(axis=n, axis_name=axis), ocl.block_index.format(axis=n))
            line = line.replace(cuda.thread_index.format(axis=n, axis_name=axis), ocl.thread_index.format(axis=n))
        line = line.replace(cuda.barrier, ocl.barrier).replace(cuda.shared, ocl.shared)
        out.append(_vector_spelling(line))
    return out


def _vector_spelling(line: str) -> str:
    """A CUDA vector load, store or lane (float4 casts, make_float4, .x) in OpenCL's spelling."""
    line = re.sub(r"= \(\*\(const float(\d)\*\)\((.*)\)\);$", r"= vload\1(0, \2);", line)
    line = re.sub(r"^(\s*)\*\(float(\d)\*\)\((.*)\) = make_float\d\((.*)\);$", r"\1vstore\2((float\2)(\4), 0, \3);",
                  line)
    return re.sub(r"(w\d+)\.([xyzw])", lambda m: f"{m.group(1)}.s{'xyzw'.index(m.group(2))}", line)


def test_opencl_and_cuda_print_the_same_statements():
    for make in (lambda: kernels.matmul(40, 36, 24), lambda: kernels.softmax(6, 100)):
        fn = lower_kernel(make())
        gpu_schedule(fn, 256)
        printed = {lang: print_launches(fn, lang, "k")[0] for lang in ("opencl", "cuda")}
        assert [p.name for p in printed["opencl"]] == [p.name for p in printed["cuda"]]
        for o, c in zip(printed["opencl"], printed["cuda"]):
            assert (o.grid, o.block, o.shared_bytes) == (c.grid, c.block, c.shared_bytes)
            assert o.text.startswith("__kernel") and c.text.startswith('extern "C" __global__')
            assert _body(o.text, "opencl") == _body(c.text, "cuda")


def test_buffers_a_kernel_reads_and_writes_are_not_restrict():
    """A row-fused softmax keeps its row statistics in global scratch: one thread writes them,
    every thread reads them after a barrier, so that buffer must not be ``restrict`` (NVRTC moved
    such a load above the barrier on an H200); the inputs and the output stay ``restrict``."""
    fn = lower_kernel(kernels.softmax(6, 1000))
    gpu_schedule(fn, 256)
    for lang, word in (("cuda", "__restrict__ "), ("opencl", "restrict ")):
        fused = [p for p in print_launches(fn, lang, "k")[0] if "__syncthreads" in p.text or "barrier(" in p.text]
        assert fused, lang
        text = fused[0].text
        decls = re.findall(r"(?:const )?float\* (?:__restrict__ |restrict )?p\d+", text)
        assert decls and any(word not in d for d in decls), decls
        for d in decls:
            name = d.split()[-1]
            loads = re.search(rf"= {name}\[", text) is not None
            stores = re.search(rf"\b{name}\[[^\]]*\] = ", text) is not None
            assert (word in d) == (not (loads and stores)), (lang, d, loads, stores)
