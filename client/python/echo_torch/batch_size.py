"""echo_torch.max_batch_size: the largest training batch of a model that fits
a device, asked of echod (FindMaxBatchSize) instead of found by trial runs
until out-of-memory. One step is captured at the batch the caller's inputs
have; the graph carries its batch dimension (echo_torch.batch_dim), and echod
rescales it to every batch it tries, with and without recomputation.

    import echo_torch
    answer = echo_torch.max_batch_size(model, x, y, device="a100-80gb",
                                       max_overhead_ratio=0.05)
    answer.without_recompute.batch_size, answer.with_recompute.batch_size
"""
import time
from typing import Optional, Union

import torch.nn as nn

from echo_torch import proto
from echo_torch.api import capture_graph, default_device
from echo_torch.optimizer_spec import optimizer_spec
from echo_torch.client import connect
from echo_torch.log import logger
from echo_torch.planners import CHUNKING

_pl = proto.planner_pb2
_dev = proto.device_pb2


def max_batch_size(model: nn.Module, *args, device: Union[str, "_dev.DeviceSpec", None] = None,
                   server: Optional[str] = None, max_overhead_ratio: float = 0.05,
                   reserved_bytes: Optional[int] = None, min_batch_size: int = 0,
                   max_batch_size: int = 0, multiple_of: int = 0,
                   allocator_rounding_bytes: Optional[int] = None,
                   timeout_seconds: float = 30.0, chunking: str = "auto", optimizer=None,
                   accumulation_steps: int = 1, update_in_backward: bool = False,
                   **kwargs):
    """Returns echod's FindMaxBatchSizeResponse for `model`'s training step
    on `args`/`kwargs` (inputs at any batch > 1 whose data inputs share the
    batch axis): without_recompute and with_recompute (AUTO within
    max_overhead_ratio), each with found, batch_size, peak_bytes,
    recompute_overhead_ratio and next_batch_peak_bytes; usable_bytes is the
    device's memory less reserved_bytes (default: echod's per-device
    allowance for the CUDA context, library handles and fragmentation).
    chunking: "auto" (as optimize plans: loss regions may run in chunks) or
    "off". optimizer: the torch.optim optimizer that trains the model, whose
    state and step then count at every batch (None: forward+backward; the
    answer's `iteration` says which). accumulation_steps: micro-batches per
    optimizer step (with optimizer); from 2 on, the gradients of earlier
    micro-batches are held while the next one runs, and count too.
    update_in_backward: (with optimizer, one micro-batch) each parameter's
    update may run in the backward, as optimize(update_in_backward=True)
    runs it (OptimizerSpec.update_in_backward).

    device: a catalog name or an echo.v1.DeviceSpec (default: the model's
    GPU if the catalog knows it, else h100-80gb). min_batch_size,
    max_batch_size, multiple_of: the search's range and step (0: 1, no
    bound, 1). The step runs once here, at the inputs' batch, to capture it
    (module state is restored). Raises ValueError when the inputs show no
    batch dimension, and echo_torch.PlanningError / ServerUnavailable for
    echod's refusals."""
    on_cuda = any(p.is_cuda for p in model.parameters())
    converted = capture_graph(model, *args, **kwargs)
    graph = converted.graph
    if graph.batch_size <= 1:
        raise ValueError(
            "echo_torch.max_batch_size: the inputs show no batch dimension (the data "
            "inputs share no axis of size > 1); pass inputs at a batch of 2 or more")
    if device is None:
        device = default_device(on_cuda)
    spec = device if isinstance(device, _dev.DeviceSpec) else _dev.DeviceSpec(name=device)
    iteration = optimizer_spec(optimizer, accumulation_steps)
    if update_in_backward:
        if iteration is None:
            raise ValueError("echo_torch.max_batch_size: update_in_backward=True needs "
                             "optimizer=")
        iteration.update_in_backward = True
    if iteration is not None:
        graph.optimizer.CopyFrom(iteration)
    request = _pl.FindMaxBatchSizeRequest(
        graph=graph, device=spec, max_overhead_ratio=float(max_overhead_ratio),
        min_batch_size=int(min_batch_size), max_batch_size=int(max_batch_size),
        multiple_of=int(multiple_of), chunking=CHUNKING[chunking])
    if reserved_bytes is not None:
        request.reserved_bytes = int(reserved_bytes)
    if allocator_rounding_bytes is None:
        allocator_rounding_bytes = 512 if on_cuda else 0
    request.allocator.rounding_bytes = int(allocator_rounding_bytes)
    client = connect(server, timeout_seconds)
    try:
        start = time.perf_counter()
        response = client.find_max_batch_size(request)
    finally:
        client.close()

    def fmt(fit):
        return str(fit.batch_size) if fit.found else "none"
    logger.info("echo_torch: largest batch of %s on %s (captured at %d): %s plain, %s with "
                "recomputation within %.0f%% (%.2f s)", type(model).__name__,
                spec.name or "a custom device", graph.batch_size, fmt(response.without_recompute),
                fmt(response.with_recompute), 100 * max_overhead_ratio,
                time.perf_counter() - start)
    return response
