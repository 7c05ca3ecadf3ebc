"""Per-op workspace and time, measured by running the joint graph once.

Some ops allocate temporaries that are not outputs (the im2col buffer of a
CPU convolution's backward, reductions' partial sums); the memory model holds
them as the op's workspace_bytes. They are measured here: the joint graph
runs once on the captured example inputs under the torch profiler, each node
inside a record_function scope, and for each node

  workspace = (peak bytes allocated during the node) - (bytes it still holds
              at its end, i.e. its outputs).

On CPU the node's duration is also recorded as measured_time_seconds: the
fastest of `repeats` runs, as one sample on a busy machine is noisy (tiny ops
are dominated by dispatch, as they are in training). The RNG state and the
module's buffers are restored afterwards, so the runs are invisible to
training.
"""
from typing import Dict, Tuple

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.profiler import ProfilerActivity, profile, record_function

from echo_torch import ops

_SCOPE = "echo_op:"


def _is_fake(value):
    return isinstance(value, torch.Tensor) and (
        value.device.type == "meta" or type(value).__name__ == "FakeTensor")


def can_profile(example_inputs) -> bool:
    flat = pytree.tree_flatten(example_inputs)[0]
    return bool(flat) and not any(_is_fake(v) for v in flat)


def _run_joint(gm: fx.GraphModule, example_inputs):
    """Runs the joint graph node by node, each in a record_function scope,
    freeing values after their last use."""
    placeholders = iter(pytree.tree_flatten(example_inputs)[0])
    last_use: Dict[fx.Node, fx.Node] = {}
    for node in gm.graph.nodes:
        for arg in node.all_input_nodes:
            last_use[arg] = node
    users_done: Dict[fx.Node, list] = {}
    for value, user in last_use.items():
        users_done.setdefault(user, []).append(value)
    env = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(placeholders)
        elif node.op == "get_attr":
            env[node] = getattr(gm, node.target)
        elif node.op == "call_function":
            args = fx.node.map_arg(node.args, env.__getitem__)
            kwargs = fx.node.map_arg(node.kwargs, env.__getitem__)
            if ops.is_getitem(node.target):
                env[node] = node.target(*args, **kwargs)
            else:
                with record_function(_SCOPE + node.name):
                    env[node] = node.target(*args, **kwargs)
        for value in users_done.get(node, ()):
            env.pop(value, None)
    env.clear()


def profile_joint(gm: fx.GraphModule, example_inputs, module: torch.nn.Module = None,
                  repeats: int = 3) -> Dict[str, Tuple[int, float]]:
    """{node name: (workspace bytes, seconds)} for the call_function nodes."""
    buffers = ({n: b.detach().clone() for n, b in module.named_buffers()}
               if module is not None else {})
    result: Dict[str, Tuple[int, float]] = {}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        for _ in range(repeats):
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                _run_joint(gm, example_inputs)
            for name, (workspace, seconds) in _per_node(prof).items():
                best = result.get(name)
                result[name] = (max(workspace, best[0]) if best else workspace,
                                min(seconds, best[1]) if best else seconds)
    if module is not None:
        for name, b in module.named_buffers():
            b.data.copy_(buffers[name])
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


def apply_profile(graph, profile_result, times: bool):
    """Sets workspace_bytes (and measured_time_seconds when `times`) on the
    echo ops, whose ids are the FX node names."""
    for op in graph.ops:
        measured = profile_result.get(op.id)
        if measured is None:
            continue
        op.workspace_bytes = measured[0]
        if times:
            op.measured_time_seconds = measured[1]
