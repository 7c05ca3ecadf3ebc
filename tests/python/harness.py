"""Runs one training step of a model several ways and measures each the
same way (echo_torch.measure): eager PyTorch, AOTAutograd's plain partition,
functorch's min-cut partition, and echo_torch with a planner."""
import dataclasses
import time
from typing import Callable, List, Optional

import torch

from echo_torch import measure, optimize, peers, proto
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
