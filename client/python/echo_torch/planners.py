"""Where a plan comes from: echod (the product), or a local rule (the plain
schedule, a given stash set) for baselines and tests."""
import dataclasses
import math
from typing import Any, List, Optional, Sequence, Tuple

import torch

from echo_torch import proto
from echo_torch.client import PlannerClient
from echo_torch.convert import ConvertedGraph
from echo_torch.chunked import RegionRunner
from echo_torch.executor import ChunkStep
from echo_torch.programs import PlanError
from echo_torch.optimizer_spec import ECHOD_OP_PREFIX, holding_gradients
from echo_torch.update_in_backward import updating_in_backward
from echo_torch.plan_cache import PlanCache

_pl = proto.planner_pb2
_g = proto.graph_pb2

POLICIES = {
    "AUTO": _pl.RECOMPUTE_POLICY_AUTO,
    "NONE": _pl.RECOMPUTE_POLICY_NONE,
    "ECHO": _pl.RECOMPUTE_POLICY_ECHO,
    "CHEN_SQRT": _pl.RECOMPUTE_POLICY_CHEN_SQRT,
    "OPTIMAL": _pl.RECOMPUTE_POLICY_OPTIMAL,
}
CHUNKING = {"auto": _pl.CHUNKING_MODE_AUTO, "off": _pl.CHUNKING_MODE_OFF}
OBJECTIVES = {
    "PEAK_BYTES": _pl.RECOMPUTE_OBJECTIVE_PEAK_BYTES,
    "STASH_BYTES": _pl.RECOMPUTE_OBJECTIVE_STASH_BYTES,
}

# echod's catalog names for the GPUs it knows, by a part of torch's name.
_CATALOG_BY_GPU_NAME = (("h200", "h200"), ("h100", "h100-80gb"), ("a100", "a100-{mem}"),
                        ("v100", "v100-{mem}"), ("2080 ti", "rtx-2080-ti"), ("l4", "l4"))


# The catalog device a GPU model's ops are priced on when the catalog does
# not know its GPU.
REFERENCE_DEVICE = "h100-80gb"


def gpu_catalog_name() -> Optional[str]:
    """echod's catalog name for the current GPU, or None when the catalog
    does not know it (or there is no GPU)."""
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name().lower()
    memory_gib = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2**30
    for needle, catalog in _CATALOG_BY_GPU_NAME:
        if needle in name:
            if "a100" in catalog:
                return catalog.format(mem="80gb" if memory_gib > 48 else "40gb")
            return catalog.format(mem="32gb" if memory_gib > 20 else "16gb")
    return None


@dataclasses.dataclass
class Plan:
    schedule: List[Tuple[int, bool]]
    source: str
    # The server's answer, when the plan came from echod.
    response: Optional["_pl.GenerateRecomputePlanResponse"] = None
    stash_tensor_ids: Optional[List[str]] = None
    cached: bool = False  # from the plan cache on disk


@dataclasses.dataclass
class PlanRequestOptions:
    policy: str = "AUTO"
    memory_limit_bytes: Optional[int] = None
    max_overhead_ratio: Optional[float] = None
    device: Optional[str] = None  # DeviceSpec catalog name
    # A whole echo.v1.DeviceSpec instead (the host CPU, host_cpu.py), named
    # `device`.
    device_spec: Any = None
    allocator_rounding_bytes: int = 0
    max_recompute_depth: int = 0
    solver_time_limit_seconds: float = 0.0
    # What AUTO minimizes within its overhead budget: "peak_bytes" (the
    # step's peak) or "stash_bytes" (the bytes the forward leaves for the
    # backward, never above the plain peak).
    objective: str = "peak_bytes"
    # "auto": AUTO may run the loss and its backward in chunks (chunked.py);
    # "off": recompute only.
    chunking: str = "auto"
    # Graph.optimizer (optimizer_spec.py): the plan is for the iteration
    # with that optimizer's state and step; None: forward+backward.
    optimizer: Any = None

    def validate(self):
        """Raises ValueError for combinations echod refuses, so that a
        wrapped model fails where it is wrapped, not at its first step."""
        if self.chunking not in CHUNKING:
            raise ValueError(f"unknown chunking {self.chunking!r}; one of {sorted(CHUNKING)}")
        if self.policy.upper() not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; one of {sorted(POLICIES)}")
        if self.objective.upper() not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; one of "
                             f"{sorted(name.lower() for name in OBJECTIVES)}")
        limit, ratio = self.memory_limit_bytes, self.max_overhead_ratio
        if limit is not None and ratio is not None:
            raise ValueError("give memory_limit_bytes or max_overhead_ratio, not both")
        if limit is not None and limit < 0:
            raise ValueError(f"memory_limit_bytes is negative: {limit}")
        if ratio is not None and not (math.isfinite(ratio) and ratio >= 0):
            raise ValueError(f"max_overhead_ratio must be finite and >= 0, got {ratio}")
        if self.objective.upper() == "STASH_BYTES" and (
                self.policy.upper() != "AUTO" or limit is not None):
            raise ValueError('objective="stash_bytes" is policy AUTO\'s with an overhead '
                             'budget: use policy="AUTO" and max_overhead_ratio (or neither '
                             'limit), not memory_limit_bytes')
        if self.policy.upper() == "OPTIMAL" and limit is None:
            raise ValueError("policy OPTIMAL minimizes the recompute cost under a peak: "
                             "give memory_limit_bytes")

    def doubtful(self) -> Optional[str]:
        """Why valid options look like a mistake (a max_overhead_ratio above
        1, more than double the compute: a percent given as a ratio)."""
        ratio = self.max_overhead_ratio
        if ratio is not None and ratio > 1:
            return (f"max_overhead_ratio={ratio:g} allows {100 * ratio:.0f}% extra compute "
                    "(it is a ratio: 0.05 is 5%)")
        return None


def plain_schedule(graph) -> List[Tuple[int, bool]]:
    """Every op once, in graph order."""
    return [(i, False) for i in range(len(graph.ops))]


def schedule_from_stash(graph, stash_ids: Sequence[str]) -> List[Tuple[int, bool]]:
    """The schedule that keeps `stash_ids` (and every input, and every output
    of an op that may not be recomputed) from the forward, and recomputes any
    other forward value a backward op reads right before that op, sources
    first. Works on the echo.v1.Graph alone: used for plans made outside
    echod and by test servers."""
    producer = {t: i for i, op in enumerate(graph.ops) for t in op.output_ids}
    forward = [op.phase in (_g.PHASE_FORWARD, _g.PHASE_UNSPECIFIED) for op in graph.ops]
    first_backward = next((i for i, f in enumerate(forward) if not f), len(graph.ops))
    keep = set(stash_ids)
    schedule = [(i, False) for i in range(first_backward)]
    live = set()  # forward values recomputed in the backward so far

    def ensure(tid):
        op_index = producer.get(tid)
        if op_index is None or not forward[op_index] or tid in keep or tid in live:
            return
        op = graph.ops[op_index]
        if op.HasField("recomputable") and not op.recomputable:
            return
        for source in op.input_ids:
            ensure(source)
        schedule.append((op_index, True))
        live.update(op.output_ids)

    for i in range(first_backward, len(graph.ops)):
        for tid in graph.ops[i].input_ids:
            ensure(tid)
        schedule.append((i, False))
    return schedule


def stash_of_schedule(graph, schedule) -> List[str]:
    """Forward-produced tensors whose forward instance some backward
    execution reads: what the forward must save under `schedule`."""
    producer = {t: i for i, op in enumerate(graph.ops) for t in op.output_ids}
    forward = [op.phase in (_g.PHASE_FORWARD, _g.PHASE_UNSPECIFIED) for op in graph.ops]
    recomputed, stash = set(), []
    in_backward = False
    for op_index, recompute in schedule:
        in_backward = in_backward or not forward[op_index]
        op = graph.ops[op_index]
        if in_backward:
            for tid in op.input_ids:
                p = producer.get(tid)
                if p is not None and forward[p] and tid not in recomputed and tid not in stash:
                    stash.append(tid)
        if recompute:
            recomputed.update(op.output_ids)
    return stash




def plan_request(graph, options: PlanRequestOptions):
    options.validate()
    request = _pl.GenerateRecomputePlanRequest(
        graph=graph, policy=POLICIES[options.policy.upper()],
        max_recompute_depth=options.max_recompute_depth,
        solver_time_limit_seconds=options.solver_time_limit_seconds,
        objective=OBJECTIVES[options.objective.upper()],
        # One timeline point, the peak's: report()'s breakdown by role.
        include_timeline=True, timeline_max_points=1)
    request.allocator.rounding_bytes = options.allocator_rounding_bytes
    request.chunking = CHUNKING[options.chunking]
    if options.device_spec is not None:
        request.device.CopyFrom(options.device_spec)
    elif options.device:
        request.device.name = options.device
    if options.memory_limit_bytes is not None:
        request.memory_limit_bytes = int(options.memory_limit_bytes)
    if options.max_overhead_ratio is not None:
        request.max_overhead_ratio = float(options.max_overhead_ratio)
    if options.optimizer is not None:
        request.graph.optimizer.CopyFrom(options.optimizer)
    return request


def schedule_from_response(converted: ConvertedGraph, response) -> List[Tuple[Any, bool]]:
    """(op index, recompute) per execution; a chunked region's steps are
    (ChunkStep, False)."""
    steps = {}
    for region in response.chunked_regions:
        runner = RegionRunner(converted, region)
        steps[region.forward_step_op_id] = ChunkStep(runner, forward=True)
        if region.backward_step_op_id:
            steps[region.backward_step_op_id] = ChunkStep(runner, forward=False)
    schedule = []
    for execution in response.schedule:
        if execution.op_id.startswith(ECHOD_OP_PREFIX):
            continue  # the user's optimizer.step(), autograd's accumulation
        index = converted.op_index.get(execution.op_id, steps.get(execution.op_id))
        if index is None:
            raise PlanError(f"plan names unknown op {execution.op_id!r}")
        schedule.append((index, execution.recompute))
    return schedule


class ServerPlanner:
    """Asks echod's GenerateRecomputePlan, through the plan cache on disk
    unless `cache` is None."""

    def __init__(self, client: PlannerClient, options: PlanRequestOptions,
                 cache: Optional[PlanCache] = None):
        self.client = client
        self.options = options
        self.cache = cache

    def holding_gradients(self) -> "ServerPlanner":
        """This planner for steps that start with gradients held (see
        optimizer_spec.gradients_held); itself without optimizer=."""
        if self.options.optimizer is None or self.options.optimizer.holds_gradients:
            return self
        options = dataclasses.replace(self.options,
                                      optimizer=holding_gradients(self.options.optimizer))
        return ServerPlanner(self.client, options, self.cache)

    def updating_in_backward(self) -> "ServerPlanner":
        """This planner for steps whose updates may run in the backward
        (update_in_backward.py)."""
        options = dataclasses.replace(
            self.options, optimizer=updating_in_backward(self.options.optimizer))
        return ServerPlanner(self.client, options, self.cache)

    def priced_on(self, device: str) -> "ServerPlanner":
        """This planner for a catalog device instead of its DeviceSpec (a
        model wrapped on the CPU that runs on a GPU)."""
        options = dataclasses.replace(self.options, device=device, device_spec=None)
        return ServerPlanner(self.client, options, self.cache)

    def cache_key(self, converted: ConvertedGraph) -> Optional[str]:
        """The plan cache's key for the graph as captured (before per-op
        measurements are added, so a cached plan skips them too)."""
        if self.cache is None:
            return None
        return self.cache.key(plan_request(converted.graph, self.options), self.client.address)

    def cached_plan(self, converted: ConvertedGraph, key: Optional[str]) -> Optional[Plan]:
        response = self.cache.get(key) if key else None
        return self._plan_from(converted, response, cached=True) if response else None

    def plan(self, converted: ConvertedGraph, cache_key: Optional[str] = None) -> Plan:
        """Asks echod; stores the answer under `cache_key` (default: the
        key of this request)."""
        request = plan_request(converted.graph, self.options)
        if self.cache is not None and cache_key is None:
            cache_key = self.cache.key(request, self.client.address)
        response = self.client.generate_recompute_plan(request)
        if cache_key:
            self.cache.put(cache_key, response)
        return self._plan_from(converted, response, cached=False)

    def _plan_from(self, converted, response, cached: bool) -> Plan:
        policy = _pl.RecomputePolicy.Name(response.policy or
                                          POLICIES[self.options.policy.upper()])
        if not response.schedule:
            # An infeasible answer may carry no schedule: run as traced.
            return Plan(plain_schedule(converted.graph), f"echod:{policy}:no-schedule",
                        response, [], cached)
        return Plan(schedule_from_response(converted, response), "echod:" + policy,
                    response, list(response.stash_tensor_ids), cached)


class PlainPlanner:
    """Every op once, in graph order: AOTAutograd's default partition."""

    def plan(self, converted):
        return Plan(plain_schedule(converted.graph), "plain")


class StashSetPlanner:
    """Stash the given tensors, recompute the rest before first backward use."""

    def __init__(self, stash_ids: Sequence[str], source="stash-set"):
        self.stash_ids = list(stash_ids)
        self.source = source

    def plan(self, converted):
        return Plan(schedule_from_stash(converted.graph, self.stash_ids), self.source,
                    stash_tensor_ids=self.stash_ids)
