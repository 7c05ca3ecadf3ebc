"""Per-op workspace and time, measured once per distinct op signature.

Some ops allocate temporaries that are not outputs (the im2col buffer of a
CPU convolution's backward, reductions' partial sums); the memory model holds
them as the op's workspace_bytes. An op's temporaries depend on its target,
its inputs' shapes, strides, dtypes and device, and its other arguments, not
on the values, and graphs of repeated steps (an RNN over 50 time steps, a
stack of identical layers) repeat the same signatures. So each distinct
signature runs once, on zero-filled inputs shaped like the traced ones
(zeros are valid indices for embeddings, gathers and losses), under the torch
profiler inside a record_function scope, and

  workspace = (peak bytes allocated during the op) - (bytes it still holds
              at its end, i.e. its outputs).

Only when the user asks for client timing (`client_timing=True`) is the op's
time also sent, as measured_time_seconds with measured_on naming the
device: the fastest of `repeats` runs, as one sample on a busy machine is
noisy. The times are taken outside the profiler (its bookkeeping would be
counted), as what the op costs in op-by-op execution: on the CPU its call;
on a GPU its host dispatch or its kernels' time, whichever is longer, since
the GPU runs behind the host (kernels are timed by CUDA events while the GPU
is held busy, so that the events see the kernels and not the dispatch; an
op that synchronizes inside, such as nonzero, waits out the hold too and
reads high by up to about 1 ms). By default echod's cost model (and its
node's profile cache) gives the times, so the same model and server give
the same plan. The RNG state is restored afterwards, so the runs are
invisible to training.
"""
import math
import time
from typing import Callable, Dict, List, Tuple

import torch
import torch.fx as fx
from torch.profiler import ProfilerActivity, profile, record_function

from echo_torch import ops

_SCOPE = "echo_op:"
# GPU cycles (about 1 ms) the GPU is held busy before a timed op, longer
# than a dispatch takes, so that its kernels start as soon as they arrive.
_HOLD_CYCLES = 2_000_000


class _NoMetadata(Exception):
    pass


def _describe(value):
    """A hashable description of an argument: tensors by layout, the rest
    by value."""
    if isinstance(value, fx.Node):
        val = value.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise _NoMetadata(value.name)
        return ("T", tuple(val.shape), tuple(val.stride()), val.dtype, str(val.device))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_describe(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _describe(v)) for k, v in sorted(value.items()))
    return repr(value)


def _materialize(node: fx.Node):
    val = node.meta["val"]
    return torch.empty_strided(tuple(val.shape), tuple(val.stride()), dtype=val.dtype,
                               device=val.device).zero_()


def distinct_ops(gm: fx.GraphModule) -> Dict[tuple, List[fx.Node]]:
    """call_function nodes grouped by signature (ops without metadata for
    an input are left out)."""
    groups: Dict[tuple, List[fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or ops.is_getitem(node.target):
            continue
        try:
            key = (node.target, _describe(node.args), _describe(node.kwargs))
        except _NoMetadata:
            continue
        groups.setdefault(key, []).append(node)
    return groups


def profile_joint(joint, repeats: int = 1,
                  timing: bool = False) -> Dict[str, Tuple[int, float]]:
    """{node name: (workspace bytes, seconds)} for the joint graph's ops, one
    run of each distinct signature per repeat (largest workspace; with
    `timing`, the fastest of `repeats` timed runs, else the profiled run's
    duration)."""
    groups = list(distinct_ops(joint.module).values())
    cuda = _on_cuda(joint.module)
    workspace: Dict[int, int] = {}
    seconds: Dict[int, float] = {}
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    # AOTAutograd calls the partitioner inside its fake-tensor mode; the
    # measurement runs real tensors outside it.
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes(), torch.random.fork_rng(devices=devices), torch.no_grad():
        for _ in range(repeats):
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                _run_each(groups, _scoped)
            for key, (bytes_, duration) in _per_node(prof).items():
                index = int(key)
                workspace[index] = max(bytes_, workspace.get(index, 0))
                if not timing:
                    seconds[index] = min(duration, seconds.get(index, math.inf))
            if timing:
                def timed(index, call):
                    seconds[index] = min(_timed(call, cuda), seconds.get(index, math.inf))
                _run_each(groups, timed)
    result: Dict[str, Tuple[int, float]] = {}
    for index, nodes in enumerate(groups):
        if index in workspace and index in seconds:
            for node in nodes:
                result[node.name] = (workspace[index], seconds[index])
    return result


def _on_cuda(gm: fx.GraphModule) -> bool:
    return any(isinstance(node.meta.get("val"), torch.Tensor) and
               node.meta["val"].device.type == "cuda" for node in gm.graph.nodes)


def _run_each(groups: List[List[fx.Node]], measure: Callable[[int, Callable], None]):
    """measure(index, call) for each signature's first op, on zero inputs;
    ops whose inputs cannot be made, or that reject zeros, are left out."""
    for index, nodes in enumerate(groups):
        node = nodes[0]
        try:
            args = fx.node.map_arg(node.args, _materialize)
            kwargs = fx.node.map_arg(node.kwargs, _materialize)
        except (RuntimeError, TypeError):
            continue  # a layout empty_strided cannot make
        try:
            measure(index, lambda: node.target(*args, **kwargs))
        except Exception:  # noqa: BLE001 - zeros it cannot take
            continue
        del args, kwargs


def _scoped(index: int, call: Callable):
    # The outputs live past the scope: what the op still holds at its end.
    with record_function(f"{_SCOPE}{index}"):
        out = call()
    del out


def _timed(call: Callable, cuda: bool) -> float:
    """Seconds the op costs in op-by-op execution (the module's docstring)."""
    if not cuda:
        start = time.perf_counter()
        out = call()
        seconds = time.perf_counter() - start
        del out  # freed outside the timed span
        return seconds
    torch.cuda.synchronize()
    torch.cuda._sleep(_HOLD_CYCLES)
    begin = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    begin.record()
    start = time.perf_counter()
    out = call()
    dispatch = time.perf_counter() - start
    end.record()
    end.synchronize()
    del out
    return max(dispatch, begin.elapsed_time(end) / 1e3)


def _per_node(prof) -> Dict[str, Tuple[int, float]]:
    result: Dict[str, Tuple[int, float]] = {}

    def allocations(event, out):
        fields = event.extra_fields
        if type(fields).__name__ == "_ExtraFields_Allocation":
            out.append((event.start_time_ns, fields.alloc_size))
        for child in event.children:
            allocations(child, out)
        return out

    def visit(event):
        if event.name.startswith(_SCOPE):
            live = peak = 0
            for _, size in sorted(allocations(event, [])):
                live += size
                peak = max(peak, live)
            seconds = event.duration_time_ns / 1e9
            result[event.name[len(_SCOPE):]] = (max(0, peak - live), seconds)
            return
        for child in event.children:
            visit(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        visit(root)
    return result


def op_bytes(graph) -> Dict[str, int]:
    """Per op id, the bytes it reads and writes."""
    sizes = {t.id: t.size_bytes for t in graph.tensors}
    return {op.id: sum(sizes.get(t, 0) for t in list(op.input_ids) + list(op.output_ids))
            for op in graph.ops}


def scaled_profile(before: Dict[str, int], reference: Dict[str, Tuple[int, float]],
                   graph) -> Dict[str, Tuple[int, float]]:
    """A measurement of a graph whose ops read and write `before`
    (op_bytes) carried to `graph`, the same graph at other sizes
    (shape_family.py): each op's workspace and time scaled by the bytes it
    reads and writes there against here, which grow with the sizes as its
    work does (the rows of a matmul, the positions of an attention). Spares
    a measurement per size."""
    after = op_bytes(graph)
    scaled = {}
    for op_id, (workspace, seconds) in reference.items():
        if op_id not in after:
            continue
        ratio = after[op_id] / before[op_id] if before.get(op_id) else 1.0
        scaled[op_id] = (int(round(workspace * ratio)), seconds * ratio)
    return scaled


def apply_profile(graph, profile_result, measured_on: str = ""):
    """Sets workspace_bytes on the echo ops (whose ids are the FX node names)
    and, when `measured_on` names where the times were taken,
    measured_time_seconds with it."""
    for op in graph.ops:
        measured = profile_result.get(op.id)
        if measured is None:
            continue
        op.workspace_bytes = measured[0]
        if measured_on:
            op.measured_time_seconds = measured[1]
            op.measured_on = measured_on
