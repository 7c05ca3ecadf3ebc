"""Measuring a training step: peak tensor memory and saved bytes.

Peak on CUDA: the caching allocator's max_memory_allocated during the step,
above what was allocated before it. Peak on CPU: the torch profiler with profile_memory=True records every allocation
and free of the c10 CPU allocator (tensor storages, including temporaries
inside ops) with its size. Replaying them in time order gives the bytes
allocated *during* the step; its maximum is the step's peak above what was
allocated before it. Frees of storages allocated before the profiler started
are not reported (the allocator does not know their size), so the step
measurement treats pre-existing tensors (parameters, buffers, the batch) as
alive throughout, and the caller adds their bytes. Memory outside the c10
allocator (oneDNN/MKL scratch, Python objects) is not counted, and the
planner's model does not include it either.

Saved bytes: torch.autograd.graph.saved_tensors_hooks sees every tensor that
autograd saves for the backward (eager autograd nodes and AOTAutograd's
ctx.save_for_backward alike). Distinct storages are summed, without those of
tensors that existed before the step (parameters, inputs).
"""
import dataclasses
from typing import Callable, Iterable, Tuple

import torch
from torch.profiler import ProfilerActivity, profile


@dataclasses.dataclass
class StepMemory:
    peak_bytes: int  # above what was allocated before the step
    end_bytes: int  # still allocated by the step when it returned


def _allocation_events(prof):
    events = []

    def walk(event):
        fields = event.extra_fields
        if type(fields).__name__ == "_ExtraFields_Allocation":
            events.append((event.start_time_ns, fields.alloc_size))
        for child in event.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    events.sort(key=lambda e: e[0])
    return events


def measure_peak(fn: Callable[[], object], device: str = "cpu") -> Tuple[StepMemory, object]:
    """Runs fn() once; returns its tensor-memory peak above what was
    allocated before it, and its result. CPU: the profiler's allocation
    events; CUDA: the caching allocator's max_memory_allocated."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        result = fn()
        torch.cuda.synchronize()
        return StepMemory(torch.cuda.max_memory_allocated() - before,
                          torch.cuda.memory_allocated() - before), result
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    live = peak = 0
    for _, size in _allocation_events(prof):
        live += size
        peak = max(peak, live)
    return StepMemory(peak, live), result


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages of `tensors`."""
    seen, total = set(), 0
    for t in tensors:
        storage = t.untyped_storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def measure_saved(fn: Callable[[], object],
                  preexisting: Iterable[torch.Tensor] = ()) -> Tuple[int, object]:
    """Bytes of distinct storages autograd saves while fn() runs (a forward),
    not counting storages of `preexisting` tensors."""
    skip = {t.untyped_storage().data_ptr() for t in preexisting}
    storages = {}

    def pack(t):
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            ptr = t.untyped_storage().data_ptr()
            if ptr not in skip:
                storages[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn()
    return sum(storages.values()), result
