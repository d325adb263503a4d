"""A whole model as one C file: every kernel as a static function plus ``tf_run``.

``tf_run(inputs, outputs, arena, weights)`` calls the kernels in program order with pointers
into the caller's buffers: model inputs, model outputs (results are written in place), one
arena for intermediates (offsets from the memory plan) and one weight blob.  Identical kernels
are emitted once: kernels are keyed by their structural hash before lowering, so a model with
twelve identical layers lowers, schedules and prints each distinct kernel only once.

With ``profile=True``, ``tf_run`` also adds each kernel call's wall time to the exported
``double tf_profile[tf_profile_count]`` (one slot per call site, in program order), which
``NativeModel.kernel_times`` reads; off by default, so normal builds carry no timers.

The library also exports ``tf_set_num_threads(n)`` / ``tf_get_num_threads()``.  The count is
kept in the library and applied by ``tf_run`` on entry, because OpenMP's thread count is a
per-calling-thread setting that other libraries (or other models) in the process may change.

A function with symbolic dims (a ``tf.symbols`` table, see ``docs/dynamic_shapes.md``) gets
``tf_run_dyn(inputs, outputs, arena, weights, tf_dims, offsets)`` instead of ``tf_run``:
``tf_dims`` holds the symbols' values in the model's symbol order (the table's order), every
kernel takes it as its last argument, intermediates live at ``arena + offsets[k]`` (the runtime
places them per call from the plan as data, ``runtime/arena_plan.py``), and output copies use
byte counts computed from the dims.  A function without symbols generates the same C as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ...ir.builtin import FuncOp
from ...ir.core import Operation, Value
from ...ir.symbolic import SymbolTable, c_identifier, symbol_table_of, symbols_of, to_c
from ...ir.types import TensorType
from ...passes.lower.graph_to_kernels import is_library_kernel
from ...passes.lower.structured_to_loop import lower_kernel
from ...passes.memory.plan import MemoryPlan, nbytes_dim, plan_dynamic, plan_memory
from ...runtime.arena_plan import DynamicPlan
from ...runtime.native import DYN_ENTRY, ENTRY, GET_THREADS, PROFILE, PROFILE_COUNT, SET_THREADS
from ...schedule.index_fold import fold_div_mod
from ...schedule.licm import hoist_invariants
from ..driver import Placement, check_lowered, kernel_key, needs_arena, output_slots, weight_blob  # noqa: F401 (weight_blob: re-exported)
from . import dw_pw, pw_dw
from .emit_loop import PRELUDE, FunctionEmitter, c_type
from .library_kernels import describe as describe_library_kernel, emit_library_kernel
from .tensorize import Prepared, Tensorizer

KERNEL_NAME = "KERNEL_NAME"      # placeholder for the C function name in emitted kernel text

Schedule = Callable[[Operation], None]

_THREADS_C = f"""#ifdef _OPENMP
#include <omp.h>
#endif
static int tf_threads = 0;   /* 0: OpenMP's default */
void {SET_THREADS}(int n) {{ tf_threads = n > 0 ? n : 0; }}
int {GET_THREADS}(void) {{
#ifdef _OPENMP
  return tf_threads > 0 ? tf_threads : omp_get_max_threads();
#else
  return 1;
#endif
}}
"""

_PROFILE_C = """#include <time.h>
static double tf_now(void) {{ struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }}
double {table}[{n}];   /* seconds per kernel call site, summed over runs */
const int {count} = {n};
"""

_ENTRY_PROLOGUE = """#ifdef _OPENMP
  if (tf_threads > 0) omp_set_num_threads(tf_threads);
#endif
"""


@dataclass
class ModelLayout:
    """Where every tensor of the model lives at run time."""

    input_types: list[TensorType]
    output_types: list[TensorType]
    weights: np.ndarray                       # uint8 blob, 64-byte aligned, entries 64-byte aligned
    arena_bytes: int
    plan: MemoryPlan
    kernel_names: list[str] = field(default_factory=list)
    unique_kernels: int = 0
    sources: dict[str, str] = field(default_factory=dict)      # C name -> the function's text
    schedules: dict[str, str] = field(default_factory=dict)    # C name -> how it was scheduled, as text
    symbols: SymbolTable = field(default_factory=SymbolTable)  # empty for a static model
    dynamic_plan: DynamicPlan | None = None                    # the arena plan as data (symbolic models)

    @property
    def is_dynamic(self) -> bool:
        return self.dynamic_plan is not None


def emit_kernel(op: Operation, schedule: Schedule | None, tensorized: Prepared | None = None,
                symbols: Sequence[str] | None = None) -> str:
    """The C text of one ``structured.kernel`` as a static function named ``KERNEL_NAME``.

    Its parameters are the kernel's operands (const pointers) then its results, in order. This
    is the one place that decides how a kernel becomes C: contractions that the tensorizer maps
    onto GEMM micro-kernels first, else the generic lowering to a scheduled loop nest.
    ``symbols`` (the model's symbol order; only for a model with symbols) makes every kernel take
    ``const int64_t* restrict tf_dims`` last; static models call the emitters exactly as before.
    """
    tiling = tensorized.library_params(op) if tensorized is not None else None
    text = emit_library_kernel(op, symbols, tiling)       # hand-written C (data-dependent ops, int8), else None
    if text is not None:
        return text
    extra = {"symbols": list(symbols)} if symbols else {}
    text = tensorized.emit(op, **extra) if tensorized is not None else None
    if text is not None:
        return text
    loop_fn = lower_kernel(op)
    if schedule is not None:
        schedule(loop_fn)
    fold_div_mod(loop_fn)             # (e // d) * d + e % d -> e: contiguous loads, not gathers
    hoist_invariants(loop_fn)
    return FunctionEmitter(loop_fn, KERNEL_NAME, **extra).emit()


def _c_name(op: Operation, index: int) -> str:
    base = c_identifier(op.attributes.get("sym_name", "k"))
    return f"k{index}_{base}"


def _schedule_text(scheduled: list, plan) -> str:
    """One kernel's schedule for people (``explain``): the trace the schedule callback returned,
    or the micro-kernel plan of a tensorized contraction."""
    if plan is not None:
        return plan.describe()
    trace = getattr(scheduled[0], "trace", None) if scheduled else None
    if trace is None:
        return "unscheduled loop nest"
    return "\n".join(str(step) for step in trace) or "default loop nest (no primitives applied)"


def generate_model_c(func: FuncOp, schedule: Schedule | None = None,
                     tensorizer: Tensorizer | None = None, profile: bool = False,
                     schedule_for: Callable[[Operation], Schedule | None] | None = None) -> tuple[str, ModelLayout]:
    """C source and layout for ``func`` (which holds only constants, kernels and the return);
    with a ``tensorizer``, contractions run on GEMM micro-kernels (see ``tensorize.py``); with
    ``profile``, ``tf_run`` times every kernel call (see the module docstring).  ``schedule_for(kernel)``
    may give one kernel its own schedule instead of ``schedule`` (the auto-tuner's records)."""
    check_lowered(func)
    outputs = func.outputs
    out_index = output_slots(func)
    table = symbol_table_of(func)
    symbols = list(table.ranges)
    tz = tensorizer.prepare(func) if tensorizer is not None else None
    pairs = fused_pairs(func.body, tz)
    dyn = plan_dynamic(func, needs_arena(out_index), symbols) if symbols else None
    plan = MemoryPlan() if dyn is not None else _fused_plan(func, needs_arena(out_index), pairs)
    blob, w_off = weight_blob(func, tz.weights, tz.replaced) if tz else weight_blob(func)
    placement = Placement(func, w_off, plan, dyn)

    def pointer(v: Value) -> str:
        ct = c_type(v.type)
        where = placement.of(v)
        if where.region == "input":
            return f"(({ct}*)inputs[{where.index}])"
        if where.region == "weights":
            return f"(({ct}*)(weights + {where.offset}))"
        if where.region == "output":
            return f"(({ct}*)outputs[{where.index}])"
        if where.region == "slot":
            return f"(({ct}*)(arena + offsets[{where.index}]))"
        return f"(({ct}*)(arena + {where.offset}))"

    functions: list[str] = []
    by_key: dict[str, str] = {}      # kernel_key -> C name
    by_text: dict[str, str] = {}     # emitted text -> C name (different structure, same code)
    calls: list[str] = []
    names: list[str] = []
    sources: dict[str, str] = {}
    schedules: dict[str, str] = {}
    scheduled: list = []             # what ``schedule`` returned for the kernel being emitted
    record = None if schedule is None else (lambda fn: scheduled.append(schedule(fn)))
    consumers = {id(second) for second, _ in pairs.values()}
    for op in func.body:
        if op.name != "structured.kernel":
            continue
        if id(op) in consumers:          # ran inside the fused call of the kernel before it
            names.append(names[-1])
            continue
        if id(op) in pairs:
            second, fusion = pairs[id(op)]
            cname, call = _fused_call(fusion, op, second, tz, by_key, by_text, functions, sources, schedules,
                                      pointer, w_off)
            calls.append(f"  {{ double t0 = tf_now(); {call} {PROFILE}[{len(names)}] += tf_now() - t0; }}"
                         if profile else f"  {call}")
            names.append(cname)
            continue
        key = kernel_key(op) + (tz.key(op) if tz else "")
        cname = by_key.get(key)
        if cname is None:
            scheduled.clear()
            own = schedule_for(op) if schedule_for is not None else None
            text = emit_kernel(op, record if own is None else (lambda fn: scheduled.append(own(fn))), tz, symbols)
            cname = by_text.get(text)
            if cname is None:
                cname = _c_name(op, len(by_text))
                by_text[text] = cname
                functions.append(text.replace(KERNEL_NAME, cname, 1))
                sources[cname] = functions[-1]
                schedules[cname] = (describe_library_kernel(op, tz.library_params(op) if tz else None)
                                    if is_library_kernel(op) else
                                    _schedule_text(scheduled, tz.plans.get(id(op)) if tz else None))
            by_key[key] = cname
        packed = [tz.operand_weight(op, i) if tz else None for i in range(len(op.operands))]
        args = [pointer(v) if w is None else f"(({c_type(v.type)}*)(weights + {w_off[id(w)]}))"
                for v, w in zip(op.operands, packed)] + [pointer(r) for r in op.results]
        if symbols:
            args.append("tf_dims")
        call = f"{cname}({', '.join(args)});"
        calls.append(f"  {{ double t0 = tf_now(); {call} {PROFILE}[{len(names)}] += tf_now() - t0; }}"
                     if profile else f"  {call}")
        names.append(cname)
    copies = placement.copies(func)
    if dyn is None:
        for j, v in copies:
            calls.append(f"  memcpy(outputs[{j}], {pointer(v)}, {v.type.nbytes});")
        entry = (f"void {ENTRY}(void* const* inputs, void* const* outputs, char* arena, const char* weights) {{\n"
                 + _ENTRY_PROLOGUE + "\n".join(calls) + "\n}\n")
    else:
        entry = _dynamic_entry(calls, [(j, pointer(v), nbytes_dim(v.type)) for j, v in copies], symbols)
    timers = _PROFILE_C.format(table=PROFILE, count=PROFILE_COUNT, n=max(len(names), 1)) if profile else ""
    src = PRELUDE + _THREADS_C + timers + "\n".join(functions) + "\n" + entry
    layout = ModelLayout([a.type for a in func.args], [v.type for v in outputs], blob,
                         plan.arena_bytes, plan, names, len(by_text), sources, schedules, table,
                         dyn.plan if dyn is not None else None)
    return src, layout


def fused_pairs(func_body, tz: Prepared | None) -> dict[int, tuple[Operation, object]]:
    """id(first kernel) -> (the kernel right after it that runs inside its call, the module that
    emits the pair): a depthwise kernel with the 1x1 after it (``dw_pw``), then, among the kernels
    left, a 1x1 with the depthwise after it (``pw_dw``).  Static functions only (both modules
    find nothing over symbolic sizes).  The tuner's fusion tasks are these pairs too."""
    pairs = {k: (v, dw_pw) for k, v in dw_pw.find_pairs(func_body, tz).items()}
    taken = set(pairs) | {id(v) for v, _ in pairs.values()}
    pairs.update({k: (v, pw_dw) for k, v in pw_dw.find_pairs(func_body, tz, taken).items()})
    return pairs


def _fused_plan(func: FuncOp, needs: Callable[[Value], bool], pairs: dict[int, tuple[Operation, object]]) -> MemoryPlan:
    """The static memory plan when kernels run fused with the kernel after them (a depthwise
    kernel with the 1x1 after it, ``dw_pw``, or a 1x1 with the depthwise after it, ``pw_dw``):
    the first one's inputs live until that call, its output gets no space."""
    index = {id(op): i for i, op in enumerate(func.body)}
    fused = [op for op in func.body if id(op) in pairs]
    keep = {id(v): index[id(pairs[id(op)][0])] for op in fused for v in op.operands}
    skipped = {id(op.results[0]) for op in fused}
    return plan_memory(func, lambda v: needs(v) and id(v) not in skipped, keep)


def _fused_call(fusion, first_op: Operation, second_op: Operation, tz: Prepared, by_key: dict, by_text: dict,
                functions: list, sources: dict, schedules: dict, pointer: Callable[[Value], str],
                w_off: dict) -> tuple[str, str]:
    """(C name, call statement) of a kernel fused with the kernel after it by ``fusion`` (the
    module ``dw_pw`` or ``pw_dw``), its text emitted once per distinct pair."""
    first, second = tz.plans[id(first_op)], tz.plans[id(second_op)]
    rows = (tz.fusion_for(first_op, second_op) if tz.fusion_for is not None else None) or 0
    key = (f"{fusion.__name__}|{kernel_key(first_op)}{tz.key(first_op)}|"
           f"{kernel_key(second_op)}{tz.key(second_op)}|{rows}")
    cname = by_key.get(key)
    if cname is None:
        text = fusion.emit(first, first_op, second, second_op, rows)
        cname = by_text.get(text)
        if cname is None:
            cname = f"{_c_name(first_op, len(by_text))}_{c_identifier(second_op.attributes.get('sym_name', 'k'))}"
            by_text[text] = cname
            functions.append(text.replace(KERNEL_NAME, cname, 1))
            sources[cname] = functions[-1]
            schedules[cname] = fusion.describe(first, second, rows)
        by_key[key] = cname

    def args(op: Operation, skip: Value | None) -> list[str]:
        out = []
        for i, v in enumerate(op.operands):
            w = tz.operand_weight(op, i)
            out.append("0" if v is skip else pointer(v) if w is None else
                       f"(({c_type(v.type)}*)(weights + {w_off[id(w)]}))")
        return out

    params = args(first_op, None) + args(second_op, first_op.results[0]) + [pointer(second_op.results[0])]
    return cname, f"{cname}({', '.join(params)});"


def _dynamic_entry(calls: list[str], copies: list[tuple[int, str, object]], symbols: list[str]) -> str:
    """``tf_run_dyn``: the kernel calls (which pass ``tf_dims`` on), then the output copies whose
    byte counts depend on the dims; only the symbols those counts read become C locals, read after
    the calls (a library kernel writes the true value of a data-dependent size into ``tf_dims``)."""
    used = set().union(*(symbols_of(n) for _, _, n in copies)) if copies else set()
    locals_ = [f"  const int64_t tf_sym_{c_identifier(s)} = tf_dims[{k}];" for k, s in enumerate(symbols) if s in used]
    tail = [f"  memcpy(outputs[{j}], {ptr}, (size_t)({to_c(n)}));" for j, ptr, n in copies]
    return (f"void {DYN_ENTRY}(void* const* inputs, void* const* outputs, char* arena, const char* weights, "
            f"const int64_t* tf_dims, const int64_t* offsets) {{\n"
            + _ENTRY_PROLOGUE + "\n".join(calls + locals_ + tail) + "\n}\n")
