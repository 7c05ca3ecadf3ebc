"""Which wrapping orders work with data-parallel and sharded training, and a
clear error for the others: DDP, DataParallel and FSDP go around the
optimized module; FSDP2's fully_shard goes on it, at its root only."""
from typing import List

import torch.nn as nn


def refuse_parallel_wrapper(model) -> None:
    """TypeError naming the order that works, for a model optimize() cannot
    wrap: a data-parallel wrapper, whose forward must run every step (DDP
    readies its gradient all-reduce there; a captured graph would run only
    the model inside it, and each rank would keep its own gradients), or a
    model sharded with fully_shard, at its root or per layer."""
    wrappers = [nn.parallel.DistributedDataParallel, nn.parallel.DataParallel]
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
        wrappers.append(FullyShardedDataParallel)
    except ImportError:
        pass
    if sharded_modules(model)[:1] == [""]:
        raise TypeError(
            "echo_torch.optimize: the model is sharded with fully_shard (FSDP2), whose hooks "
            "must run each step; shard the optimized module instead, at its root: "
            "fully_shard(echo_torch.optimize(model, ...))")
    refuse_sharded_layers(model, TypeError)
    if isinstance(model, tuple(wrappers)):
        name = type(model).__name__
        raise TypeError(f"echo_torch.optimize: the model is a {name}, whose forward must run "
                        f"each step; optimize the module inside it instead: "
                        f"{name}(echo_torch.optimize(module, ...))")


def sharded_modules(model: nn.Module) -> List[str]:
    """Names of the modules ("" for `model`) sharded with fully_shard."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return []
    return [name for name, module in model.named_modules() if isinstance(module, FSDPModule)]


def refuse_sharded_layers(model: nn.Module, error: type) -> None:
    """Per-layer FSDP2 (fully_shard on modules inside the optimized one):
    their all-gathers run in hooks that a captured step cannot replay, and
    the plan does not see them yet."""
    layers = [name for name in sharded_modules(model) if name]
    if layers:
        shown = ", ".join(layers[:3]) + (f" and {len(layers) - 3} more" if len(layers) > 3
                                          else "")
        raise error(
            f"echo_torch: {shown} of {type(model).__name__} are sharded with fully_shard "
            "(per-layer FSDP2), which echo_torch does not plan yet; shard the optimized "
            "module at its root only: fully_shard(echo_torch.optimize(model, ...))")
