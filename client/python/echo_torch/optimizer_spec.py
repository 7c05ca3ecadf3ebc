"""The optimizer a model trains with, as echod counts it (Graph.optimizer,
docs/design.md §4): its kind, the dtype of its state and how its step runs,
read from a torch.optim optimizer. echod then answers for the iteration:
the optimizer's state and its step's temporaries beside forward+backward."""
from typing import Optional

import torch

from echo_torch import proto

_g = proto.graph_pb2

# Ops echod adds to an iteration's schedule have ids that start with this:
# the optimizer's step (the framework's own optimizer.step()) and, with
# gradients held, the adds of each new gradient into its held one
# (autograd's AccumulateGrad). The hook runs neither from the plan.
ECHOD_OP_PREFIX = "echo."

_KINDS = (
    (torch.optim.AdamW, _g.OPTIMIZER_KIND_ADAMW),
    (torch.optim.Adam, _g.OPTIMIZER_KIND_ADAM),
    (torch.optim.Adagrad, _g.OPTIMIZER_KIND_ADAGRAD),
    (torch.optim.RMSprop, _g.OPTIMIZER_KIND_RMSPROP),
)


def _implementation(optimizer: torch.optim.Optimizer) -> int:
    """torch's choice: fused or foreach when the groups ask; by default
    foreach when every parameter is on a GPU, else the for-loop."""
    groups = optimizer.param_groups
    if any(group.get("fused") for group in groups):
        return _g.OPTIMIZER_IMPLEMENTATION_FUSED
    if any(group.get("foreach") for group in groups):
        return _g.OPTIMIZER_IMPLEMENTATION_FOREACH
    if all(group.get("foreach") is False for group in groups):
        return _g.OPTIMIZER_IMPLEMENTATION_FOR_LOOP
    on_gpu = all(p.is_cuda for group in groups for p in group["params"])
    return (_g.OPTIMIZER_IMPLEMENTATION_FOREACH if on_gpu
            else _g.OPTIMIZER_IMPLEMENTATION_FOR_LOOP)


def optimizer_spec(optimizer: Optional[torch.optim.Optimizer],
                   accumulation_steps: int = 1) -> Optional["_g.OptimizerSpec"]:
    """Graph.optimizer for `optimizer`, or None for None. Raises ValueError
    for an optimizer echod does not model (its state would be guessed).
    accumulation_steps: micro-batches per optimizer step; from 2 on, the
    gradients of earlier ones are held while the next runs
    (OptimizerSpec.holds_gradients)."""
    if int(accumulation_steps) < 1:
        raise ValueError(f"echo_torch: accumulation_steps must be >= 1, got {accumulation_steps}")
    if optimizer is None:
        if accumulation_steps > 1:
            raise ValueError("echo_torch: accumulation_steps needs optimizer= (the step that "
                             "reads the held gradients)")
        return None
    kind = next((value for cls, value in _KINDS if isinstance(optimizer, cls)), None)
    if isinstance(optimizer, torch.optim.SGD):
        momentum = any(group.get("momentum", 0) for group in optimizer.param_groups)
        kind = _g.OPTIMIZER_KIND_SGD_MOMENTUM if momentum else _g.OPTIMIZER_KIND_SGD
    if kind is None:
        raise ValueError(
            f"echo_torch: optimizer {type(optimizer).__name__} is not one echod models "
            f"(SGD, SGD with momentum, Adam, AdamW, Adagrad, RMSprop); pass optimizer=None "
            f"to plan forward+backward only")
    return _g.OptimizerSpec(kind=kind, implementation=_implementation(optimizer),
                            holds_gradients=accumulation_steps > 1)


def holding_gradients(spec: "_g.OptimizerSpec") -> "_g.OptimizerSpec":
    """`spec` with holds_gradients set: for a step that runs while its
    parameters' gradients are held (accumulation, zero_grad(set_to_none=False))."""
    held = _g.OptimizerSpec()
    held.CopyFrom(spec)
    held.holds_gradients = True
    return held


def gradients_held(module: torch.nn.Module) -> bool:
    """Whether a step of `module` starts with gradients held: some parameter
    that trains has one (an earlier micro-batch's, or zeroed but kept)."""
    return any(p.grad is not None for p in module.parameters() if p.requires_grad)
