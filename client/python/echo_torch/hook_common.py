"""What optimize() and backend() share: the input signature a plan is kept
for, the hint for a capture that one graph cannot hold, and the planner
that asks echod (with its default device)."""
import warnings
from typing import Dict

import torch

from echo_torch import capture as capture_lib, hf_masks, host_cpu
from echo_torch.client import connect
from echo_torch.optimizer_spec import optimizer_spec
from echo_torch.plan_cache import PlanCache
from echo_torch.planners import (REFERENCE_DEVICE, PlanRequestOptions, ServerPlanner,
                                 gpu_catalog_name)


def _autocast_state():
    state = []
    for device in ("cpu", "cuda"):
        try:
            enabled = torch.is_autocast_enabled(device)
            dtype = torch.get_autocast_dtype(device) if enabled else None
        except (TypeError, AttributeError, RuntimeError):
            continue
        state.append((device, enabled, dtype))
    return tuple(state)


def _signature(args, kwargs, training, shapes: bool = True):
    """What makes a captured graph reusable: shapes, dtypes, devices and
    requires_grad of the tensors, other values, training mode, autocast, and
    what Hugging Face's mask code would see in eager (hf_masks.facts).
    shapes=False: ranks in place of shapes (the calls one capture with
    symbolic sizes may serve, shape_family.py)."""
    def describe(value):
        if isinstance(value, torch.Tensor):
            return ("T", tuple(value.shape) if shapes else value.dim(), value.dtype,
                    value.device.type, value.requires_grad)
        if isinstance(value, (list, tuple)):
            return tuple(describe(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, describe(v)) for k, v in sorted(value.items()))
        return repr(value)
    return (describe(args), describe(kwargs), training, _autocast_state(),
            _aliasing(args, kwargs), hf_masks.facts(args, kwargs))


def _aliasing(args, kwargs) -> tuple:
    """The call's structure (capture.CallLayout reads its tensors by
    position in it) and, per tensor argument, the first argument that is
    the same tensor: the capture passes a tensor given twice
    (labels=input_ids) once, so a call with two tensors there needs a
    capture of its own."""
    first: Dict[int, int] = {}
    leaves, spec = torch.utils._pytree.tree_flatten(capture_lib.call_tree(args, kwargs))
    return str(spec), tuple(first.setdefault(id(v), i) for i, v in enumerate(leaves)
                            if isinstance(v, torch.Tensor))


def _is_symbolic(value) -> bool:
    """A SymInt/SymFloat/SymBool, or a tensor with a symbolic size or stride."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    return isinstance(value, torch.Tensor) and any(
        isinstance(d, torch.SymInt) for d in tuple(value.shape) + tuple(value.stride()))


def _capture_hint(error) -> str:
    """What to do when one graph cannot hold the model: values or shapes
    that depend on data (`.item()`, `nonzero`) end AOTAutograd's trace."""
    from torch._subclasses import fake_tensor
    if isinstance(error, (fake_tensor.DataDependentOutputException,
                          fake_tensor.DynamicOutputShapeException)):
        return ("; its forward depends on tensor values (.item(), nonzero, ...), which "
                "one captured graph cannot hold (checks behind "
                "torch.compiler.is_compiling(), True while echo_torch traces, are skipped; "
                "this one is not behind it): use torch.compile(model, "
                "backend=echo_torch.backend(...)), which plans the graphs between them")
    return ""


# echod prices a GPU model's ops with the roofline of a DeviceSpec from its
# catalog: the model's GPU when it is one the catalog knows, else
# REFERENCE_DEVICE. A CPU model is priced on the host CPU (host_cpu.py).


def default_device(on_cuda: bool) -> str:
    """The catalog name echod prices a GPU model's ops with when the user
    names none (a CPU model: host_cpu.device_spec())."""
    return (gpu_catalog_name() if on_cuda else None) or REFERENCE_DEVICE


def _server_planner(server, policy, memory_limit_bytes, max_overhead_ratio, timeout_seconds,
                    device, allocator_rounding_bytes, max_recompute_depth,
                    solver_time_limit_seconds, plan_cache, on_cuda, objective,
                    chunking="auto", optimizer=None):
    if allocator_rounding_bytes is None:
        allocator_rounding_bytes = 512 if on_cuda else 0
    device_spec = None
    if device is None and not on_cuda:
        device_spec = host_cpu.device_spec()
        device = device_spec.name
    elif device is None:
        device = default_device(on_cuda)
    options = PlanRequestOptions(
        policy=policy, memory_limit_bytes=memory_limit_bytes,
        max_overhead_ratio=max_overhead_ratio, device=device, device_spec=device_spec,
        allocator_rounding_bytes=allocator_rounding_bytes,
        max_recompute_depth=max_recompute_depth,
        solver_time_limit_seconds=solver_time_limit_seconds, objective=objective,
        chunking=chunking, optimizer=optimizer_spec(optimizer))
    options.validate()
    doubt = options.doubtful()
    if doubt:
        warnings.warn(f"echo_torch: {doubt}", RuntimeWarning, stacklevel=3)
    client = connect(server, timeout_seconds)
    cache = None if plan_cache is False else (
        plan_cache if isinstance(plan_cache, PlanCache) else PlanCache())
    planner = ServerPlanner(client, options, cache)
    return planner, lambda: client.wait_ready(min(timeout_seconds, 5.0))
