"""echo_torch.optimize / echo_torch.report: the user-facing hook."""
import collections
import dataclasses
import warnings
from typing import Dict, List, Optional

import torch
import torch.nn as nn

from echo_torch import capture as capture_lib
from echo_torch import profile_ops as op_profiler
from echo_torch.client import PlannerClient, ServerUnavailable
from echo_torch.convert import ConvertedGraph, convert
from echo_torch.executor import build_programs
from echo_torch.planners import PlainPlanner, PlanRequestOptions, ServerPlanner


@dataclasses.dataclass
class PlanReport:
    """What a plan did to one captured graph (one input signature)."""
    source: str
    ops: int
    tensors: int
    feasible: Optional[bool] = None
    baseline_peak_bytes: Optional[int] = None
    planned_peak_bytes: Optional[int] = None
    predicted_overhead_ratio: Optional[float] = None
    # Forward activations the default partition saves vs what this plan saves.
    default_saved_bytes: int = 0
    planned_saved_bytes: int = 0
    recompute_executions: int = 0
    recomputed_op_types: Dict[str, int] = dataclasses.field(default_factory=dict)
    # Tensors the plan said to stash that the executor did not need, and the
    # other way round (views excluded: the executor saves their bases).
    stash_mismatch: List[str] = dataclasses.field(default_factory=list)
    message: str = ""

    @property
    def saved_bytes_reduction(self) -> int:
        return self.default_saved_bytes - self.planned_saved_bytes

    def __str__(self):
        mib = 1 << 20
        lines = [f"echo_torch plan ({self.source}): {self.ops} ops, {self.tensors} tensors"]
        if self.baseline_peak_bytes is not None:
            lines.append(
                f"  predicted peak {self.baseline_peak_bytes / mib:.1f} MiB -> "
                f"{self.planned_peak_bytes / mib:.1f} MiB "
                f"({self.baseline_peak_bytes - self.planned_peak_bytes:,} bytes saved), "
                f"feasible={self.feasible}")
        lines.append(f"  saved for backward {self.default_saved_bytes / mib:.1f} MiB -> "
                     f"{self.planned_saved_bytes / mib:.1f} MiB")
        types = ", ".join(f"{k} x{v}" for k, v in sorted(self.recomputed_op_types.items()))
        lines.append(f"  {self.recompute_executions} recomputations ({types or 'none'})")
        if self.predicted_overhead_ratio is not None:
            lines.append(f"  predicted extra compute {100 * self.predicted_overhead_ratio:.2f}%")
        if self.stash_mismatch:
            lines.append(f"  stash differs from the plan's: {self.stash_mismatch[:8]}")
        if self.message:
            lines.append(f"  server: {self.message}")
        return "\n".join(lines)


def _make_report(converted: ConvertedGraph, plan, programs) -> PlanReport:
    graph = converted.graph
    types = collections.Counter(graph.ops[i].op_type for i, rec in plan.schedule if rec)
    report = PlanReport(
        source=plan.source, ops=len(graph.ops), tensors=len(graph.tensors),
        default_saved_bytes=converted.stash_candidate_bytes(),
        planned_saved_bytes=sum(converted.size_bytes[t] for t in programs.saved_activation_ids),
        recompute_executions=programs.recompute_count, recomputed_op_types=dict(types))
    response = plan.response
    if response is not None:
        report.feasible = response.feasible
        report.baseline_peak_bytes = response.baseline_peak_bytes
        report.planned_peak_bytes = response.planned_peak_bytes
        report.predicted_overhead_ratio = response.recompute_overhead_ratio
        report.message = response.message
    if plan.stash_tensor_ids is not None:
        owners = {t for t in plan.stash_tensor_ids if converted.size_bytes.get(t, 0) > 0}
        saved = {t for t in programs.saved_activation_ids if converted.size_bytes.get(t, 0) > 0}
        report.stash_mismatch = sorted(owners ^ saved)
    return report


def _signature(args, kwargs, training):
    def describe(value):
        if isinstance(value, torch.Tensor):
            return ("T", tuple(value.shape), value.dtype, value.device.type,
                    value.requires_grad)
        if isinstance(value, (list, tuple)):
            return tuple(describe(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, describe(v)) for k, v in sorted(value.items()))
        return repr(value)
    return (describe(args), describe(kwargs), training)


class _Compiled:
    def __init__(self, fn):
        self.fn = fn
        self.ready = False
        self.converted: Optional[ConvertedGraph] = None
        self.report: Optional[PlanReport] = None
        self.programs = None


class EchoModule(nn.Module):
    """Runs `module` with forward/backward programs built from a plan.

    One plan per input signature (shapes, dtypes, training mode); the first
    call with a new signature traces and plans. Inference (no grad) runs the
    module unchanged.
    """

    def __init__(self, module: nn.Module, planner, capture=None,
                 on_error: str = "fallback", preflight=None, profile_ops: bool = True):
        super().__init__()
        self.module = module
        self._profile_ops = profile_ops
        self._planner = planner
        self._capture = capture or capture_lib.default_capture()
        self._on_error = on_error
        self._preflight = preflight
        self._compiled: Dict[tuple, _Compiled] = {}
        self._fallback_reason: Optional[str] = None
        self._last: Optional[_Compiled] = None

    @property
    def fallback_reason(self) -> Optional[str]:
        """Why the module runs unmodified, or None."""
        return self._fallback_reason

    @property
    def converted(self) -> Optional[ConvertedGraph]:
        return self._last.converted if self._last else None

    @property
    def programs(self):
        return self._last.programs if self._last else None

    def reports(self) -> List[PlanReport]:
        return [c.report for c in self._compiled.values() if c.report is not None]

    def forward(self, *args, **kwargs):
        if (self._fallback_reason is not None or not torch.is_grad_enabled()
                or not any(p.requires_grad for p in self.module.parameters())):
            return self.module(*args, **kwargs)
        key = _signature(args, kwargs, self.module.training)
        entry = self._compiled.get(key)
        if entry is not None and entry.ready:
            self._last = entry
            out = entry.fn(*args, **kwargs)
            self._after_step()
            return out
        return self._first_call(key, args, kwargs)

    def _first_call(self, key, args, kwargs):
        buffers = {name: b.detach().clone() for name, b in self.module.named_buffers()}
        entry = None

        def restore_buffers():
            for name, b in self.module.named_buffers():
                b.data.copy_(buffers[name])

        def partitioner(joint):
            # Tracing ran the module eagerly (torch 1.13 traces with real
            # tensors): undo its buffer updates before the real step.
            restore_buffers()
            entry.converted = convert(joint)
            if self._profile_ops and op_profiler.can_profile(joint.example_inputs):
                measured = op_profiler.profile_joint(joint.module, joint.example_inputs,
                                                     self.module)
                on_cpu = all(p.device.type == "cpu" for p in self.module.parameters())
                op_profiler.apply_profile(entry.converted.graph, measured, times=on_cpu)
            plan = self._planner.plan(entry.converted)
            entry.programs = build_programs(entry.converted, plan.schedule)
            entry.report = _make_report(entry.converted, plan, entry.programs)
            return entry.programs.forward, entry.programs.backward

        try:
            if self._preflight is not None:
                self._preflight()
            entry = _Compiled(self._capture.wrap(self.module, partitioner))
            out = entry.fn(*args, **kwargs)
        except ServerUnavailable as error:
            restore_buffers()
            return self._fall_back(f"{error}; running the model unmodified", args, kwargs)
        except Exception as error:  # noqa: BLE001
            if self._on_error == "raise":
                raise
            restore_buffers()
            return self._fall_back(
                f"planning failed ({type(error).__name__}: {error}); running the "
                "model unmodified", args, kwargs)
        entry.ready = True
        self._compiled[key] = entry
        self._last = entry
        self._after_step()
        return out

    def _fall_back(self, reason, args, kwargs):
        self._fallback_reason = reason
        warnings.warn(f"echo_torch: {reason}", RuntimeWarning, stacklevel=3)
        return self.module(*args, **kwargs)

    def _after_step(self):
        # The functional graph updates running statistics through
        # native_batch_norm but drops the num_batches_tracked increment.
        if not self.module.training:
            return
        for m in self.module.modules():
            if (isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
                    and m.num_batches_tracked is not None):
                m.num_batches_tracked.add_(1)


def optimize(model: nn.Module, *, server: Optional[str] = None, policy: str = "AUTO",
             memory_limit_bytes: Optional[int] = None,
             max_overhead_ratio: Optional[float] = None,
             timeout_seconds: float = 30.0, device: Optional[str] = None,
             allocator_rounding_bytes: Optional[int] = None,
             max_recompute_depth: int = 0, solver_time_limit_seconds: float = 0.0,
             on_error: str = "fallback", profile_ops: bool = True, planner=None,
             capture=None) -> EchoModule:
    """Wraps `model` so that its training steps follow an echod recompute plan.

    server: "host:port" or "unix:///path" (default $ECHO_SERVER, else
    127.0.0.1:50051). policy: AUTO, NONE, ECHO, CHEN_SQRT or OPTIMAL. Give at
    most one of memory_limit_bytes and max_overhead_ratio (neither: the
    server's default of 5% overhead). device: a DeviceSpec catalog name for
    the cost model. allocator_rounding_bytes: default 512 for CUDA models (the
    caching allocator), 0 on CPU. If echod is unreachable the model runs
    unmodified and one warning is issued; on_error="raise" raises on other
    planning failures instead of falling back. profile_ops: run the joint
    graph once at capture to measure each op's workspace (and, on CPU, its
    time) for the memory and cost model. planner: a local planner
    (echo_torch.planners) instead of echod.
    """
    if planner is None:
        if allocator_rounding_bytes is None:
            on_cuda = any(p.is_cuda for p in model.parameters())
            allocator_rounding_bytes = 512 if on_cuda else 0
        request_options = PlanRequestOptions(
            policy=policy, memory_limit_bytes=memory_limit_bytes,
            max_overhead_ratio=max_overhead_ratio, device=device,
            allocator_rounding_bytes=allocator_rounding_bytes,
            max_recompute_depth=max_recompute_depth,
            solver_time_limit_seconds=solver_time_limit_seconds)
        request_options.validate()
        client = PlannerClient(server, timeout_seconds)
        planner = ServerPlanner(client, request_options)
        preflight = lambda: client.wait_ready(min(timeout_seconds, 5.0))  # noqa: E731
    else:
        preflight = None
    return EchoModule(model, planner, capture=capture, on_error=on_error,
                      preflight=preflight, profile_ops=profile_ops)


def report(model: EchoModule) -> Optional[PlanReport]:
    """The plan of the most recent input signature (None before the first
    training step, or when the model runs unmodified)."""
    if not isinstance(model, EchoModule):
        raise TypeError("echo_torch.report expects a module from echo_torch.optimize")
    return model._last.report if model._last else None


def capture_graph(model: nn.Module, *args, **kwargs) -> ConvertedGraph:
    """Traces one training-mode forward of `model` on `args` and returns the
    converted joint graph; needs no server. Buffers are left as they were."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    wrapped = EchoModule(model, PlainPlanner(), on_error="raise")
    with torch.enable_grad():
        wrapped(*args, **kwargs)
    for name, b in model.named_buffers():
        b.data.copy_(buffers[name])
    return wrapped.converted
