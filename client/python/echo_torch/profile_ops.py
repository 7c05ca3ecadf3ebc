"""Per-op workspace and time, measured by running the joint graph once.

Some ops allocate temporaries that are not outputs (the im2col buffer of a
CPU convolution's backward, reductions' partial sums); the memory model holds
them as the op's workspace_bytes. They are measured here: the joint graph
runs once on the captured example inputs under the torch profiler, each node
inside a record_function scope, and for each node

  workspace = (peak bytes allocated during the node) - (bytes it still holds
              at its end, i.e. its outputs).

Only when the user asks for client timing (`client_timing=True`) is the
node's duration also sent, as measured_time_seconds with measured_on naming
the device: the fastest of `repeats` runs, as one sample on a busy machine
is noisy. By default echod's cost model (and its node's profile cache) gives
the times, so the same model and server give the same plan. The RNG state
is restored afterwards, so the runs are invisible to training.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.profiler import ProfilerActivity, profile, record_function

from echo_torch import ops

_SCOPE = "echo_op:"


def real_joint_inputs(joint):
    """(primals, tangents) with real values for running the joint graph: the
    captured real primals and tangents of ones shaped like the traced ones;
    None when the capture has no real primals."""
    if joint.real_primals is None or joint.example_inputs is None:
        return None
    _, fake_tangents = joint.example_inputs

    def like(fake):
        if not isinstance(fake, torch.Tensor):
            return fake
        return torch.ones(fake.shape, dtype=fake.dtype, device=fake.device)

    return list(joint.real_primals), [like(t) for t in fake_tangents]


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


def profile_joint(joint, repeats: int = 1) -> Optional[Dict[str, Tuple[int, float]]]:
    """{node name: (workspace bytes, seconds)} for the call_function nodes,
    over `repeats` runs (largest workspace, fastest time); None when the
    capture has no real inputs. The joint graph is functional, so running it
    changes no module state; the RNG state is restored."""
    result: Dict[str, Tuple[int, float]] = {}
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    # AOTAutograd calls the partitioner inside its fake-tensor mode; the
    # measurement runs real tensors outside it.
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes(), torch.random.fork_rng(devices=devices), torch.no_grad():
        joint_inputs = real_joint_inputs(joint)
        if joint_inputs is None:
            return None
        gm = joint.module
        for _ in range(repeats):
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                _run_joint(gm, joint_inputs)
            for name, (workspace, seconds) in _per_node(prof).items():
                best = result.get(name)
                result[name] = (max(workspace, best[0]) if best else workspace,
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
