"""The host CPU as a device echod prices with (issue 48): a model on the CPU
with no device named is planned for the CPU it runs on, not for an H100.

Its ops are priced by the times the hook measures at capture (the per-op
workspace run, pipeline._measure); the roofline numbers below price only
what that run leaves out. What no op time shows is the memory itself: a CPU
process on glibc malloc gives a step's memory back to the OS at its end and
faults it in again the next step. On the project's 2-core VM that first
touch costs about 0.6 ms per MiB, a third of a GPT-2 step, so there a lower
peak is time saved. The calibration measures it (fresh against reused
memory), and echod counts the plan's peak with it in the predicted step time
(GenerateRecomputePlanResponse.step_overhead_ratio). Under an allocator that
keeps its memory (jemalloc, tcmalloc) the measurement reads about 0.

Measured once per machine, torch version and thread count (about 0.3 s) and
kept beside the plan cache, so that the same model asks for the same plan
in every process; `calibrate(fresh=True)` measures again.
"""
import json
import math
import os
import platform
import threading
import time
from typing import Optional

import torch

from echo_torch import plan_cache, proto
from echo_torch.log import logger

# Bumped when what is measured, or how, changes: older files are measured again.
VERSION = 1
_FILE = "host_cpu.json"
_MIB = 1 << 20
_NUMBERS = {"memory_bytes", "flops_per_second", "memory_bandwidth_bytes_per_second",
            "first_touch_seconds_per_byte"}


def device_name() -> str:
    """Where op times taken here are taken: "cpu:<arch>" (measured_on)."""
    return "cpu:" + platform.machine()


def _fastest(call, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def _measure() -> dict:
    n = 512
    a, b = torch.randn(n, n), torch.randn(n, n)
    flops = 2 * n**3 / _fastest(lambda: torch.mm(a, b))
    elements = 8 * _MIB // 4
    src, dst = torch.ones(elements), torch.empty(elements)
    bandwidth = 2 * 4 * elements / _fastest(lambda: dst.copy_(src))
    # 64 MiB: above glibc's largest mmap threshold, so every fresh one is
    # taken from the OS and faulted in (the step's memory, given back at
    # its end, is too); the reused buffer is the same work without faults.
    touched = 64 * _MIB
    warm = torch.empty(touched // 4)
    warm.fill_(1.0)
    reused = _fastest(lambda: warm.fill_(1.0))
    fresh = _fastest(lambda: torch.empty(touched // 4).fill_(1.0))
    first_touch = max(0.0, (fresh - reused) / touched)
    pages = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"memory_bytes": int(pages), "flops_per_second": flops,
            "memory_bandwidth_bytes_per_second": bandwidth,
            "first_touch_seconds_per_byte": first_touch}


def _key() -> dict:
    return {"version": VERSION, "machine": platform.machine(),
            "processor": platform.processor(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "cpus": os.cpu_count()}


def _path() -> str:
    return os.path.join(plan_cache.default_directory(), _FILE)


def _load(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("key") != _key():
        return None
    numbers = saved.get("numbers")
    if not isinstance(numbers, dict) or set(numbers) != _NUMBERS:
        return None
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
               for v in numbers.values()) or numbers["memory_bytes"] <= 0:
        return None
    return numbers


def _save(path: str, numbers: dict) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"key": _key(), "numbers": numbers}, f, indent=1)
        os.replace(tmp, path)
    except OSError as error:
        logger.warning("echo_torch: could not keep the host CPU's calibration at %s: %s",
                       path, error)


_calibrated: Optional[dict] = None


def calibrate(fresh: bool = False) -> dict:
    """The host CPU's numbers: memory_bytes, flops_per_second (f32),
    memory_bandwidth_bytes_per_second, first_touch_seconds_per_byte."""
    global _calibrated
    path = _path()
    if not fresh:
        if _calibrated is not None and _calibrated["key"] == _key():
            return _calibrated["numbers"]
        numbers = _load(path)
        if numbers is not None:
            _calibrated = {"key": _key(), "numbers": numbers}
            return numbers
    start = time.perf_counter()
    numbers = _measure()
    logger.info("echo_torch: calibrated the host CPU in %.2f s: %.1f GFLOP/s, %.1f GB/s, "
                "first touch %.3f ms/MiB", time.perf_counter() - start,
                numbers["flops_per_second"] / 1e9,
                numbers["memory_bandwidth_bytes_per_second"] / 1e9,
                numbers["first_touch_seconds_per_byte"] * _MIB * 1e3)
    _save(path, numbers)
    _calibrated = {"key": _key(), "numbers": numbers}
    return numbers


def device_spec():
    """The host CPU as an echo.v1.DeviceSpec, named device_name()."""
    numbers = calibrate()
    spec = proto.device_pb2.DeviceSpec(
        name=device_name(), memory_bytes=numbers["memory_bytes"],
        memory_bandwidth_bytes_per_second=numbers["memory_bandwidth_bytes_per_second"],
        first_touch_seconds_per_byte=numbers["first_touch_seconds_per_byte"])
    spec.peak_flops.add(dtype=proto.graph_pb2.DTYPE_FLOAT32,
                        flops_per_second=numbers["flops_per_second"])
    return spec
