"""One captured joint graph -> echo graph -> plan -> programs, with the time
of each stage logged, and what the plan did as a PlanReport. Shared by
`echo_torch.optimize` and the `torch.compile` backend."""
import collections
import dataclasses
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch

from echo_torch import host_cpu, profile_ops as op_profiler
from echo_torch.convert import ConvertedGraph, JointGraph, convert
from echo_torch.executor import Programs, build_programs
from echo_torch.log import logger
from echo_torch.planners import REFERENCE_DEVICE, gpu_catalog_name
from echo_torch.update_in_backward import updated_positions


@dataclasses.dataclass
class PlanReport:
    """What a plan did to one captured graph (one input signature)."""
    source: str
    ops: int
    tensors: int
    feasible: Optional[bool] = None
    baseline_peak_bytes: Optional[int] = None
    planned_peak_bytes: Optional[int] = None
    peak_lower_bound_bytes: Optional[int] = None
    # With an overhead budget: no plan within it stashes fewer bytes.
    stash_lower_bound_bytes: Optional[int] = None
    # The predicted step time against the plain step's, minus 1
    # (step_overhead_ratio: on the host CPU the peak the plan saves is time
    # saved, docs/pytorch.md), and the plan's extra compute alone.
    predicted_overhead_ratio: Optional[float] = None
    predicted_extra_compute_ratio: Optional[float] = None
    # Ops echod priced with the times sent with them (client_timing), not
    # with its cost model.
    measured_ops: int = 0
    # Forward activations the default partition saves vs what this plan saves.
    default_saved_bytes: int = 0
    planned_saved_bytes: int = 0
    recompute_executions: int = 0
    recomputed_op_types: Dict[str, int] = dataclasses.field(default_factory=dict)
    # Tensors the plan said to stash that the executor did not need, and the
    # other way round (views excluded: the executor saves their bases).
    stash_mismatch: List[str] = dataclasses.field(default_factory=list)
    message: str = ""
    # Seconds spent before the first step, by stage.
    seconds: Dict[str, float] = dataclasses.field(default_factory=dict)
    # Forward outputs (bytes) planned as held by the caller to the end of the
    # step (Hugging Face's logits beside the loss), and the gradients of
    # outputs planned as never sent (convert.assumed_unused_tangents).
    output_bytes: int = 0
    unused_output_gradients: List[str] = dataclasses.field(default_factory=list)
    # Loss regions the plan runs in chunks (the plan's ChunkedRegion
    # messages: chunks, rows, bytes, explanation), and the losses it left
    # unchunked, with why.
    chunked_regions: List[Any] = dataclasses.field(default_factory=list)
    chunking_notes: List[str] = dataclasses.field(default_factory=list)
    # A backend's graphs, when this report sums several (combine).
    graphs: List["PlanReport"] = dataclasses.field(default_factory=list)
    # Set when the step this report describes ran the model unmodified: why.
    unplanned_reason: Optional[str] = None
    # What the peaks cover: forward+backward, with the optimizer's state and
    # step when optimize() was given optimizer= (echod's words).
    iteration: str = ""
    # The planned peak by role (echod's MemoryBreakdown: parameter_bytes,
    # optimizer_state_bytes, gradient_bytes, input_bytes,
    # stashed_activation_bytes, transient_bytes, workspace_bytes), and the
    # op running then (" (recompute)" when it is a recomputation).
    peak_breakdown: Dict[str, int] = dataclasses.field(default_factory=dict)
    peak_op: str = ""
    # The shapes of the call's tensors (optimize() plans each shape).
    shapes: str = ""

    @property
    def planned(self) -> bool:
        return self.unplanned_reason is None

    @property
    def saved_bytes_reduction(self) -> int:
        return self.default_saved_bytes - self.planned_saved_bytes

    _SUMMED = ("ops", "tensors", "default_saved_bytes", "planned_saved_bytes",
               "recompute_executions", "output_bytes", "measured_ops")

    @classmethod
    def combine(cls, reports: List["PlanReport"]) -> "PlanReport":
        """One report for a backend's graphs: counts and bytes summed, each
        graph's own report (with its peaks) in `graphs`; peaks are per graph
        (the graphs of a step do not run at once), so not summed here."""
        if len(reports) == 1:
            return reports[0]
        total = cls(source=f"{len(reports)} graphs", ops=0, tensors=0,
                    feasible=all(r.feasible is not False for r in reports),
                    graphs=list(reports))
        for field in cls._SUMMED:
            setattr(total, field, sum(getattr(r, field) for r in reports))
        for r in reports:
            for op_type, count in r.recomputed_op_types.items():
                total.recomputed_op_types[op_type] = (
                    total.recomputed_op_types.get(op_type, 0) + count)
            total.stash_mismatch.extend(r.stash_mismatch)
            total.unused_output_gradients.extend(r.unused_output_gradients)
            for stage, seconds in r.seconds.items():
                total.seconds[stage] = total.seconds.get(stage, 0.0) + seconds
        return total

    def __str__(self):
        mib = 1 << 20
        if self.unplanned_reason is not None:
            return f"echo_torch: the last step ran unplanned: {self.unplanned_reason}"
        lines = [f"echo_torch plan ({self.source}): {self.ops} ops, {self.tensors} tensors"]
        lines.extend("  " + str(g).replace("\n", "\n  ") for g in self.graphs)
        if self.iteration:
            lines.append(f"  iteration: {self.iteration}")
        if self.baseline_peak_bytes is not None:
            lines.append(
                f"  predicted peak {self.baseline_peak_bytes / mib:.1f} MiB -> "
                f"{self.planned_peak_bytes / mib:.1f} MiB "
                f"({self.baseline_peak_bytes - self.planned_peak_bytes:,} bytes saved), "
                f"feasible={self.feasible}")
        if self.peak_breakdown:
            lines.append(f"  at the planned peak (op {self.peak_op}): " + ", ".join(
                f"{word} {self.peak_breakdown[field] / mib:.1f} MiB"
                for field, word in _BREAKDOWN_WORDS if self.peak_breakdown.get(field)))
        lines.append(f"  saved for backward {self.default_saved_bytes / mib:.1f} MiB -> "
                     f"{self.planned_saved_bytes / mib:.1f} MiB")
        types = ", ".join(f"{k} x{v}" for k, v in sorted(self.recomputed_op_types.items()))
        lines.append(f"  {self.recompute_executions} recomputations ({types or 'none'})")
        if self.predicted_extra_compute_ratio is not None:
            lines.append(f"  predicted extra compute {100 * self.predicted_extra_compute_ratio:.2f}%"
                         f", step time {100 * self.predicted_overhead_ratio:+.2f}%")
        lines.append(f"  forward outputs held by the caller to the end of the step: "
                     f"{self.output_bytes / mib:.1f} MiB")
        if self.unused_output_gradients:
            lines.append(f"  planned without the gradients of {len(self.unused_output_gradients)} "
                         f"output(s) beside the loss (never made unless sent)")
        if self.seconds:
            lines.append("  time before the first step: " + ", ".join(
                f"{k} {v:.2f} s" for k, v in self.seconds.items()))
        for region in self.chunked_regions:
            lines.append(f"  chunked: {region.explanation}")
        for note in self.chunking_notes:
            lines.append(f"  not chunked: {note}")
        if self.stash_mismatch:
            lines.append(f"  stash differs from the plan's: {self.stash_mismatch[:8]}")
        if self.message:
            lines.append(f"  server: {self.message}")
        return "\n".join(lines)


@dataclasses.dataclass
class PlannedGraph:
    converted: ConvertedGraph
    programs: Programs
    report: PlanReport
    # The backward's outputs (gradients) the plan updates in the backward
    # (update_in_backward.py).
    updated_positions: List[int] = dataclasses.field(default_factory=list)


def _forward_output_bytes(converted: ConvertedGraph) -> int:
    """Bytes of the distinct storages of the forward's outputs."""
    owners = set()
    for node in converted.fwd_outputs:
        tid = converted.tensor_of.get(node) if node is not None else None
        if tid is not None:
            owners.update(converted.view_bases.get(tid) or [tid])
    return sum(converted.size_bytes.get(t, 0) for t in owners)


_BREAKDOWN_WORDS = (("parameter_bytes", "parameters"), ("gradient_bytes", "gradients"),
                    ("optimizer_state_bytes", "optimizer state"),
                    ("stashed_activation_bytes", "stashed activations"),
                    ("transient_bytes", "temporaries"), ("workspace_bytes", "op workspace"),
                    ("input_bytes", "inputs"))


def _peak_breakdown(timeline) -> Tuple[Dict[str, int], str]:
    """The timeline's peak point by role, and its op."""
    point = next((p for p in timeline.points if p.step == timeline.peak_step), None)
    if point is None:
        return {}, ""
    breakdown = {field: getattr(point.bytes, field) for field, _ in _BREAKDOWN_WORDS}
    return breakdown, point.op_id + (" (recompute)" if point.recompute else "")


def _make_report(converted: ConvertedGraph, plan, programs) -> PlanReport:
    graph = converted.graph
    types = collections.Counter(graph.ops[i].op_type for i, rec in plan.schedule if rec)
    report = PlanReport(
        source=plan.source, ops=len(graph.ops), tensors=len(graph.tensors),
        default_saved_bytes=converted.stash_candidate_bytes(),
        planned_saved_bytes=sum(converted.size_bytes[t] for t in programs.saved_activation_ids),
        recompute_executions=programs.recompute_count, recomputed_op_types=dict(types),
        output_bytes=_forward_output_bytes(converted),
        unused_output_gradients=list(converted.unused_tangents))
    response = plan.response
    if response is not None:
        report.feasible = response.feasible
        report.baseline_peak_bytes = response.baseline_peak_bytes
        report.planned_peak_bytes = response.planned_peak_bytes
        report.peak_lower_bound_bytes = response.peak_lower_bound_bytes
        report.stash_lower_bound_bytes = response.stash_lower_bound_bytes or None
        report.predicted_extra_compute_ratio = response.recompute_overhead_ratio
        # A plan cached before echod answered step_overhead_ratio has 0 there.
        report.predicted_overhead_ratio = (response.step_overhead_ratio or
                                           response.recompute_overhead_ratio)
        report.measured_ops = response.cost_sources.measured_ops
        report.message = response.message
        report.chunked_regions = list(response.chunked_regions)
        report.chunking_notes = list(response.chunking_notes)
        report.iteration = response.iteration
        report.peak_breakdown, report.peak_op = _peak_breakdown(response.timeline)
    if plan.stash_tensor_ids is not None:
        # Graph outputs (e.g. updated batch-norm statistics) are live to the
        # end whether or not a plan lists them.
        outputs = {t.id for t in graph.tensors if t.is_output}
        owners = {t for t in plan.stash_tensor_ids
                  if converted.size_bytes.get(t, 0) > 0 and t not in outputs}
        saved = {t for t in programs.saved_activation_ids
                 if converted.size_bytes.get(t, 0) > 0 and t not in outputs}
        report.stash_mismatch = sorted(owners ^ saved)
    return report


def _device_description(joint: JointGraph) -> str:
    """Where client-side op times are taken: "cuda:<name>" or "cpu:<arch>"."""
    for value in joint.example_inputs[0] if joint.example_inputs else ():
        if isinstance(value, torch.Tensor) and value.is_cuda:
            return "cuda:" + torch.cuda.get_device_name(value.device)
    return host_cpu.device_name()


def _device_spec(planner):
    """The whole DeviceSpec a server planner prices with (the host CPU's,
    host_cpu.py), or None: a catalog name, or a local planner."""
    return getattr(getattr(planner, "options", None), "device_spec", None)


def _timing_label(joint: JointGraph, planner) -> str:
    """measured_on for client times. echod prices ops with a time only when
    measured_on names the catalog device it prices on, so times taken on
    the GPU the catalog entry stands for carry that name; times taken
    elsewhere (a CPU, another GPU) keep where they were taken, and echod's
    cost model prices the ops (said once in the log)."""
    taken = _device_description(joint)
    priced = getattr(getattr(planner, "options", None), "device", None)
    if not priced or priced == taken:
        return taken  # no device asked for, or this one: the times taken here
    if taken.startswith("cuda:") and gpu_catalog_name() == priced:
        return priced
    logger.warning("echo_torch: client_timing: the times taken on %s do not price %s; "
                   "echod's cost model prices the ops", taken, priced)
    return taken


def _measure(joint: JointGraph, converted: ConvertedGraph, client_timing: bool, seconds,
             planner):
    """Per-op workspace (and, with client_timing, times) into the graph. A
    plan priced on the host CPU (host_cpu.py) gets the workspace run's
    times too: they are this CPU's. A graph of a symbolic capture's family
    (shape_family.py) is measured at its first shape; later shapes get that
    measurement scaled to their sizes."""
    start = time.perf_counter()
    family = joint.family
    scaled = family is not None and family.reference_profile is not None
    if scaled:
        measured = op_profiler.scaled_profile(*family.reference_profile, converted.graph)
    else:
        measured = op_profiler.profile_joint(joint, repeats=3 if client_timing else 1,
                                             timing=client_timing)
        if family is not None:
            family.reference_profile = (op_profiler.op_bytes(converted.graph), measured)
    priced = _device_spec(planner)
    on_host = priced is not None and priced.name == _device_description(joint)
    op_profiler.apply_profile(converted.graph, measured,
                              _timing_label(joint, planner) if client_timing or on_host else "")
    seconds["profile"] = time.perf_counter() - start
    logger.info("echo_torch: %s per-op workspace%s in %.1f s",
                "scaled the first size's" if scaled else "measured",
                " and times" if client_timing else "", seconds["profile"])


def plan_joint(joint: JointGraph, planner, measure_workspace: bool = True,
               client_timing: bool = False) -> PlannedGraph:
    """Converts, optionally measures per-op workspace (and, when asked,
    times), plans, and builds the programs."""
    seconds = {}
    start = time.perf_counter()
    converted = convert(joint)
    seconds["convert"] = time.perf_counter() - start
    logger.info("echo_torch: converted %s: %d ops, %d tensors in %.1f s", joint.name,
                len(converted.graph.ops), len(converted.graph.tensors), seconds["convert"])

    # Wrapped on the CPU, run on a GPU: priced as a GPU model, not on the host.
    if _device_spec(planner) is not None and _device_description(joint).startswith("cuda:"):
        planner = planner.priced_on(gpu_catalog_name() or REFERENCE_DEVICE)
    # A plan cached for this graph as captured skips the measurements too.
    cache_key = planner.cache_key(converted) if hasattr(planner, "cache_key") else None
    start = time.perf_counter()
    plan = planner.cached_plan(converted, cache_key) if cache_key else None
    if plan is None:
        if measure_workspace or client_timing:
            _measure(joint, converted, client_timing, seconds, planner)
        start = time.perf_counter()
        plan = (planner.plan(converted, cache_key=cache_key) if cache_key
                else planner.plan(converted))
    seconds["plan"] = time.perf_counter() - start
    programs = build_programs(converted, plan.schedule)
    report = _make_report(converted, plan, programs)
    report.seconds = seconds
    logger.info("echo_torch: planned %s (%s%s) in %.2f s: saved for backward %.1f -> "
                "%.1f MiB, %d recomputations", joint.name, plan.source,
                ", cached" if plan.cached else "", seconds["plan"],
                report.default_saved_bytes / 2**20, report.planned_saved_bytes / 2**20,
                report.recompute_executions)
    return PlannedGraph(converted, programs, report,
                        updated_positions(converted, plan.response))


class InfeasibleWarning:
    """Warns once per owner when a memory limit is below what the plan
    reaches."""

    def __init__(self):
        self.warned = False

    def check(self, report: PlanReport, stacklevel: int = 4):
        if self.warned or report.feasible is not False:
            return
        self.warned = True
        mib = 1 << 20
        reached = report.planned_peak_bytes or 0
        bound = report.peak_lower_bound_bytes or 0
        warnings.warn(
            f"echo_torch: the memory limit cannot be met for {report.source}; the plan "
            f"reaches a peak of {reached / mib:.1f} MiB ({reached} bytes; no schedule goes "
            f"below {bound / mib:.1f} MiB). Raise memory_limit_bytes to at least that, or "
            "use max_overhead_ratio", RuntimeWarning, stacklevel=stacklevel)
