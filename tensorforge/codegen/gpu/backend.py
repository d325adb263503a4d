"""The GPU backends (OpenCL and CUDA): scheduled kernels and the driver's plan -> a ``GpuProgram``
-> a runnable model.

Per distinct kernel: lower to a ``loop.func``, give it the GPU schedule (``schedule/gpu.py``),
verify it against the target (``verify.py``), print each launch in the target's language
(``printer.py``).  Per kernel call: one ``Launch`` per launch of that kernel, its arguments the
places the driver's plan gives the kernel's operands and results, then the kernel's scratch.
Outputs that no kernel writes in place (an input or a constant returned as is) get a byte copy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...dialects.scalar import INDEX
from ...errors import CompileError
from ...ir.builder import Builder, make_op
from ...ir.builtin import FuncOp, ModuleOp
from ...ir.core import Block, Operation, Region
from ...ir.symbolic import c_identifier, symbol_table_of
from ...ir.types import BufferType, DType
from ...passes.lower.graph_to_kernels import is_library_kernel
from ...passes.lower.structured_to_loop import lower_kernel
from ...passes.memory.plan import plan_memory
from ...runtime.arena_plan import aligned
from ...runtime.signature import specs_from_values
from ...schedule.gpu import GpuConfig, flat, gpu_schedule
from ..driver import (Placement, check_lowered, kernel_key, kernels, lower_for, needs_arena, output_slots,
                      weight_blob)
from ..target import GpuTarget
from .printer import LANGUAGES, print_launches, scratch_types
from .program import BufferRef, GpuProgram, KernelInfo, Launch, pack_regions
from .verify import verify_gpu_kernel

SCRATCH_ALIGN = 256


@dataclass
class _Compiled:
    """One distinct kernel: its launches and the scratch offsets of its global temporaries."""

    launches: list
    scratch_offsets: list[int]
    scratch_bytes: int


def gpu_target(language: str) -> GpuTarget:
    """The target a language compiles for: the H200 for CUDA; for OpenCL the portable limits
    (``GpuTarget.opencl_default``), which every device tensorforge targets allows."""
    if language == "cuda":
        return GpuTarget.h200()
    return GpuTarget.opencl_default()


def _where(loc) -> BufferRef:
    return BufferRef(loc.region, loc.offset, loc.index)


def compile_kernel(op: Operation, cname: str, target: GpuTarget, config: GpuConfig | None = None
                   ) -> tuple[_Compiled, dict[str, KernelInfo]]:
    """One structured.kernel as launches in ``target.language`` (``config``: the GPU schedule's knobs,
    default or tuned)."""
    if is_library_kernel(op):
        raise CompileError(f"kernel '{op.attributes.get('sym_name')}'{op.location_str()}: "
                           f"'{op.attributes.get('tf.library')}' has a hand-written CPU kernel only (data-dependent "
                           f"or int8/bf16) and no GPU form yet; compile with target='cpu'")
    fn = lower_kernel(op, cname)
    plan = gpu_schedule(fn, target.max_threads_per_block, config)
    verify_gpu_kernel(fn, target)
    printed, _ = print_launches(fn, target.language, cname)
    offsets, end = pack_regions([t.nbytes for t in scratch_types(fn)], SCRATCH_ALIGN)
    infos = {p.name: KernelInfo(p.name, p.text, p.block[0] * p.block[1] * p.block[2], p.shared_bytes,
                                plan.describe(), op.attributes.get("sym_name", "")) for p in printed}
    return _Compiled(printed, offsets, aligned(end, SCRATCH_ALIGN)), infos


def _copy_kernel(nbytes: int, language: str) -> tuple[_Compiled, dict[str, KernelInfo]]:
    """A kernel copying ``nbytes`` bytes (an output that is an input or a constant)."""
    t = BufferType((nbytes,), DType.u8)
    blk = Block([t, t])
    fn = make_op("loop.func", [], {"sym_name": f"tf_copy_{nbytes}", "num_inputs": 1}, regions=[Region([blk])])
    b = Builder.at_end(blk)
    region = Region([Block([INDEX])])
    loop = b.create("loop.for", [], {"lb": 0, "ub": nbytes, "step": 1, "kind": "serial", "reduction": False,
                                     "tag": "copy"}, regions=[region])
    inner = Builder.at_end(region.blocks[0])
    i = region.blocks[0].args[0]
    v = inner.create("loop.load", [blk.args[0], i]).results[0]
    inner.create("loop.store", [v, blk.args[1], i])
    b.create("loop.return", [])
    flat(loop, 256)
    printed, _ = print_launches(fn, language, f"tf_copy_{nbytes}")
    infos = {p.name: KernelInfo(p.name, p.text, p.block[0], 0, "byte copy", "output copy") for p in printed}
    return _Compiled(printed, [], 0), infos


def plan_program(func: FuncOp, target: GpuTarget,
                 config_for: Callable[[Operation], GpuConfig | None] | None = None) -> GpuProgram:
    """The whole lowered function as a ``GpuProgram`` for ``target``; ``config_for(kernel)`` gives a
    kernel its tuned schedule knobs (None: the defaults)."""
    check_lowered(func)
    if symbol_table_of(func).ranges:
        raise CompileError("a model with symbolic (dynamic) shapes has no GPU build yet; give example inputs "
                           "or shapes= to compile it for fixed sizes")
    plan = plan_memory(func, needs_arena(output_slots(func)))
    blob, w_off = weight_blob(func)
    placement = Placement(func, w_off, plan)
    compiled: dict[str, _Compiled] = {}
    infos: dict[str, KernelInfo] = {}
    by_key: dict[str, str] = {}
    launches: list[Launch] = []
    scratch = 0
    for op in kernels(func):
        key = kernel_key(op)
        cname = by_key.get(key)
        if cname is None:
            cname = f"k{len(by_key)}_{c_identifier(op.attributes.get('sym_name', 'k'))}"
            by_key[key] = cname
            compiled[cname], more = compile_kernel(op, cname, target, config_for(op) if config_for else None)
            infos.update(more)
        c = compiled[cname]
        scratch = max(scratch, c.scratch_bytes)
        args = tuple([_where(placement.of(v)) for v in list(op.operands) + list(op.results)]
                     + [BufferRef("scratch", off) for off in c.scratch_offsets])
        launches += [Launch(p.name, p.grid, p.block, args) for p in c.launches]
    for j, v in placement.copies(func):
        nbytes = v.type.nbytes
        if nbytes == 0:
            continue
        cname = f"tf_copy_{nbytes}"
        if cname not in compiled:
            compiled[cname], more = _copy_kernel(nbytes, target.language)
            infos.update(more)
        args = (_where(placement.of(v)), BufferRef("output", 0, j))
        launches += [Launch(p.name, p.grid, p.block, args) for p in compiled[cname].launches]
    return GpuProgram(target.language, program_source(target.language, infos), launches, infos, blob, plan.arena_bytes, scratch,
                      [a.type for a in func.args], [v.type for v in func.outputs])


def program_source(language: str, infos: dict[str, KernelInfo]) -> str:
    """The source of a program: the language's prelude, then every kernel function."""
    return LANGUAGES[language].prelude + "\n" + "\n".join(i.source for i in infos.values())


def build_gpu(module: ModuleOp, language: str, threads: int | None = None, profile: bool = False,
              tuning: Any = None, fast_math: bool = False, target: GpuTarget | None = None, db: Any = "auto",
              **_: Any):
    """Compiles ``module`` for a GPU; returns ``(GpuModel, source)``.  ``db``: the tuning database
    whose best GPU configs the kernels get (``tune.gpu.gpu_tuning_from_db``; None: untuned)."""
    from ...runtime.gpu_model import GpuModel
    from ...tune.gpu import gpu_tuning_from_db
    if fast_math:
        raise CompileError("fast_math=True is a C-compiler option; the GPU backends compile IEEE arithmetic only")
    target = target or gpu_target(language)
    lowered = lower_for(module, target)
    program = plan_program(lowered.main, target, config_for=gpu_tuning_from_db(db, target))
    func = module.main
    inputs = specs_from_values(func.args, [a.type for a in func.args], "input")
    outputs = specs_from_values(func.outputs, [v.type for v in func.outputs], "output")
    model = GpuModel(program, inputs, outputs, target)
    return model, program.source
