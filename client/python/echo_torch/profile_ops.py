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
duration also sent, as measured_time_seconds with measured_on naming the
device: the fastest of `repeats` runs, as one sample on a busy machine is
noisy. By default echod's cost model (and its node's profile cache) gives
the times, so the same model and server give the same plan. The RNG state is
restored afterwards, so the runs are invisible to training.
"""
from typing import Dict, List, Tuple

import torch
import torch.fx as fx
from torch.profiler import ProfilerActivity, profile, record_function

from echo_torch import ops

_SCOPE = "echo_op:"


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


def profile_joint(joint, repeats: int = 1) -> Dict[str, Tuple[int, float]]:
    """{node name: (workspace bytes, seconds)} for the joint graph's ops, one
    run of each distinct signature per repeat (largest workspace, fastest
    time)."""
    groups = distinct_ops(joint.module)
    result: Dict[str, Tuple[int, float]] = {}
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    # AOTAutograd calls the partitioner inside its fake-tensor mode; the
    # measurement runs real tensors outside it.
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes(), torch.random.fork_rng(devices=devices), torch.no_grad():
        for _ in range(repeats):
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                for index, nodes in enumerate(groups.values()):
                    node = nodes[0]
                    try:
                        args = fx.node.map_arg(node.args, _materialize)
                        kwargs = fx.node.map_arg(node.kwargs, _materialize)
                    except (RuntimeError, TypeError):
                        continue  # a layout empty_strided cannot make
                    try:
                        with record_function(f"{_SCOPE}{index}"):
                            out = node.target(*args, **kwargs)
                    except Exception:  # noqa: BLE001 - zeros it cannot take
                        continue
                    del out, args, kwargs
            measured = _per_node(prof)
            for index, nodes in enumerate(groups.values()):
                if str(index) not in measured:
                    continue
                workspace, seconds = measured[str(index)]
                for node in nodes:
                    best = result.get(node.name)
                    result[node.name] = (max(workspace, best[0]) if best else workspace,
                                         min(seconds, best[1]) if best else seconds)
    return result


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
