"""The optimizer a model trains with, as echod counts it (Graph.optimizer,
docs/design.md §4): its kind, the dtype of its state and how its step runs,
read from a torch.optim optimizer. echod then answers for the iteration:
the optimizer's state and its step's temporaries beside forward+backward."""
from typing import Optional

import torch

from echo_torch import proto

_g = proto.graph_pb2

# The step op echod appends to an iteration's schedule: it stands for the
# framework's own optimizer.step(), which the hook never runs itself.
OPTIMIZER_STEP_OP_ID = "echo.optimizer_step"

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


def optimizer_spec(optimizer: Optional[torch.optim.Optimizer]) -> Optional["_g.OptimizerSpec"]:
    """Graph.optimizer for `optimizer`, or None for None. Raises ValueError
    for an optimizer echod does not model (its state would be guessed)."""
    if optimizer is None:
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
    return _g.OptimizerSpec(kind=kind, implementation=_implementation(optimizer))
