"""Runs one training step of a model several ways and measures each the
same way (tests/python/measure.py): eager PyTorch, AOTAutograd's plain partition,
functorch's min-cut partition, and echo_torch with a planner."""
import dataclasses
import time
from typing import Callable, List, Optional

import torch

from echo_torch import optimize, proto

import measure
import peers
from echo_torch.planners import PlainPlanner


@dataclasses.dataclass
class StepResult:
    loss: torch.Tensor
    grads: List[Optional[torch.Tensor]]
    peak_bytes: int  # measured: preexisting tensors + step peak
    saved_bytes: int  # measured: activations autograd saved
    seconds: float  # fastest of the timed steps (least disturbed by other load)
    wrapped: object = None


def preexisting(model, inputs, kwargs=None):
    tensors = [t for t in torch.utils._pytree.tree_leaves((list(inputs), kwargs or {}))
               if isinstance(t, torch.Tensor)]
    return list(model.parameters()) + list(model.buffers()) + tensors


def run_step(model, wrapped, inputs, seed=0, timing_runs=0, kwargs=None,
             loss_of=None) -> StepResult:
    """Warm-up step (captures and plans), then a measured step for loss,
    grads and peak, then a forward for saved bytes. Same seed each time, so
    dropout draws the same masks. wrapped(*inputs, **kwargs) is the forward;
    loss_of(its output) the loss (default: the output itself); the whole
    output is held through the backward, as a training loop holds a Hugging
    Face model's output (logits beside the loss)."""
    params = list(model.parameters())
    kwargs = kwargs or {}
    loss_of = loss_of or (lambda out: out)
    existing = preexisting(model, inputs, kwargs)
    base = measure.tensor_bytes(existing)

    def step():
        torch.manual_seed(seed)
        out = wrapped(*inputs, **kwargs)
        loss = loss_of(out)
        loss.backward()
        del out
        return loss.detach()

    device = params[0].device.type if params else "cpu"
    step()
    model.zero_grad(set_to_none=True)
    memory, loss = measure.measure_peak(step, device)
    grads = [p.grad.clone() if p.grad is not None else None for p in params]
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    saved, out = measure.measure_saved(lambda: wrapped(*inputs, **kwargs), existing)
    del out
    times = []
    for _ in range(timing_runs):
        start = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return StepResult(loss, grads, base + memory.peak_bytes, saved,
                      min(times) if times else 0.0, wrapped)


@dataclasses.dataclass
class Case:
    """One training step: model(*args, **kwargs), whose loss is
    loss_of(output) (default: the output)."""
    model: torch.nn.Module
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    loss_of: Optional[Callable] = None

    def run(self, wrapped, **kw) -> StepResult:
        """run_step of `wrapped` (the model, optimize()d or compiled)."""
        return run_step(self.model, wrapped, self.args, kwargs=self.kwargs,
                        loss_of=self.loss_of, **kw)


def plain_module(model):
    """optimize with AOTAutograd's plain partition (no server)."""
    return optimize(model, planner=PlainPlanner(), on_error="raise")


def eager(model, inputs, **kw):
    return run_step(model, model, inputs, **kw)


def aot_plain(model, inputs, **kw):
    return run_step(model, plain_module(model), inputs, **kw)


def mincut(model, inputs, **kw):
    return run_step(model, peers.mincut_module(model), inputs, **kw)


def echo(model, inputs, address, policy, **kw):
    wrapped = optimize(model, server=address, policy=policy, on_error="raise")
    return run_step(model, wrapped, inputs, **kw)


def estimate(client, graph):
    return client.estimate_memory(proto.planner_pb2.EstimateMemoryRequest(graph=graph))


def max_grad_diff(a: StepResult, b: StepResult) -> float:
    return max(((x - y).abs().max().item() for x, y in zip(a.grads, b.grads)
                if x is not None), default=0.0)


def held_after_forward(model, wrapped, inputs, seed=0, kwargs=None):
    """(held, output) bytes of one forward: `held` is what the forward left
    allocated for the backward beyond its outputs (the CPU allocator's live
    bytes when it returned, minus the output's distinct storages), so it
    counts what autograd saves and also what checkpointing keeps outside
    autograd's saved tensors (torch.utils.checkpoint's block inputs, its
    selective policy's cached outputs), which measure_saved does not see.
    An output storage that the backward also reads is not counted."""
    kwargs = kwargs or {}
    existing = preexisting(model, inputs, kwargs)
    skip = {t.untyped_storage().data_ptr() for t in existing}
    torch.manual_seed(seed)
    memory, out = measure.measure_peak(lambda: wrapped(*inputs, **kwargs))
    outputs = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)
               and t.untyped_storage().data_ptr() not in skip]
    output_bytes = measure.tensor_bytes(outputs)
    del out, outputs
    model.zero_grad(set_to_none=True)
    return memory.end_bytes - output_bytes, output_bytes


@dataclasses.dataclass
class OpCall:
    """One aten op a step ran: the op, and its arguments and outputs with
    every tensor replaced by a TensorInfo."""
    func: object
    args: tuple
    kwargs: dict
    outputs: list

    def key(self):
        return (str(self.func), repr(self.args), repr(self.kwargs))


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    shape: tuple
    dtype: torch.dtype
    nbytes: int

    def __repr__(self):
        return f"T{self.shape}{str(self.dtype)[6:]}"


def _tensor_info(value):
    if isinstance(value, torch.Tensor):
        return TensorInfo(tuple(value.shape), value.dtype,
                          value.numel() * value.element_size())
    return value


def op_calls(model, wrapped, inputs, seed=0, kwargs=None, loss_of=None,
             warm_up=False) -> List[OpCall]:
    """The aten ops one training step (forward, loss, backward) runs, in
    order (warm_up: after an unlogged step, for a wrapper that captures at
    its first call), seen by a TorchDispatchMode outside everything the step pushes
    (torch.utils.checkpoint's selective policy answers cached ops without
    running them: those are not listed). A multiset difference of two
    steps' lists is what one recomputes that the other does not."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: List[OpCall] = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            tree_map = torch.utils._pytree.tree_map
            calls.append(OpCall(func, tree_map(_tensor_info, tuple(args)),
                                tree_map(_tensor_info, dict(kwargs)),
                                [_tensor_info(t) for t in torch.utils._pytree.tree_leaves(out)
                                 if isinstance(t, torch.Tensor)]))
            return out

    kwargs = kwargs or {}
    loss_of = loss_of or (lambda out: out)
    if warm_up:
        torch.manual_seed(seed)
        loss_of(wrapped(*inputs, **kwargs)).backward()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with Log():
        out = wrapped(*inputs, **kwargs)
        loss_of(out).backward()
    del out
    model.zero_grad(set_to_none=True)
    return calls
