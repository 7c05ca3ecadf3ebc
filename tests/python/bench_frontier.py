#!/usr/bin/env python3
"""Memory / extra-compute frontier of torch's activation-memory budget and of Echo's plans.

Per model of the suite, on the same inputs.

  export ECHO_TORCH_CACHE_DIR=/tmp/bench_plan_cache
  build/venv/bin/python tests/python/bench_frontier.py \
      [--models nmt,transformer,gpt,nmt-paper] [--nmt-paper] [--cuda] \
      [--server HOST:PORT] [--out tests/python/frontier]

Without --server it starts build/bin/echod (or $ECHO_ECHOD) on a free port.
Models at their CI sizes (models.build); nmt-paper (or --nmt-paper) is the
NMT at models.NMT_PAPER size (slow on CPU). --cuda runs on the GPU and
measures peaks with torch.cuda.max_memory_allocated (tests/gpu/run_on_gpu.sh).
Rendering (tables, frontiers, plots) is in frontier_report.py.

Points, per model (one training step each, same inputs, same seed):

  eager                   the model as written (reference);
  torch default           AOTAutograd + functorch's min-cut partitioner
                          (min_cut_rematerialization_partition) at torch's
                          default activation_memory_budget (1.0);
  torch budget B          the same under
                          torch._functorch.config.patch(activation_memory_budget=B)
                          for B in 0.9, 0.7, 0.5, 0.3, 0.1;
  Echo AUTO @ peak(B)     echo_torch.optimize(policy="AUTO",
                          memory_limit_bytes=<measured step peak of torch
                          budget B>, device="h100-80gb"), for the five
                          budgets and for the default (B = 1.0);
  Echo AUTO 5%            policy AUTO, max_overhead_ratio=0.05, device h100-80gb
                          (and 0%, 10%, 20%, 30%: Echo's frontier where torch's
                          budgets spend more);
  Echo AUTO stash 5%      the same with objective="stash_bytes" (AUTO
                          minimizes the bytes the forward leaves for the
                          backward, never above the plain peak: torch's
                          budget's objective), and at the extra roofline
                          compute each torch budget B spent ("stash @
                          extra(B)"): the same-compute comparison;
  Echo ECHO               policy ECHO, device h100-80gb.

Both partitions run with the same freeing executor (echo_torch.executor:
torch's fw/bw GraphModules through program_from_graph_module), so memory is
measured the same way (tests/python/measure.py, as harness.run_step does):

  saved     bytes of the distinct storages autograd keeps from the forward
            for the backward (saved_tensors_hooks; parameters and inputs
            excluded): "MiB held for backward";
  peak      bytes of pre-existing tensors (parameters, buffers, batch) plus
            the CPU allocator's peak during one forward+backward.

Extra compute, two deterministic ways (no timing on this busy CPU):

  extra FLOPs     torch.utils.flop_counter.FlopCounterMode over one step
                  (forward+backward) minus the eager step's FLOPs, relative to
                  the eager step's FLOPs. FlopCounterMode counts matmul-like
                  ops (mm, bmm, addmm, conv, attention) only: recomputed
                  element-wise ops add 0.
  extra roofline  roofline time on h100-80gb (echod's cost model, EstimateMemory
                  compute_time_seconds) of the recomputed op executions,
                  relative to that of the whole joint graph (every op once,
                  the plain step). The recomputed executions are copies of
                  their echo ops (unique ids, the tensors they read/write) in
                  a graph of their own. Echo: the (op, recompute=True)
                  entries of the plan's schedule. torch: the call_function
                  nodes of torch's backward GraphModule whose names are
                  forward-phase ops of the joint graph (the joint the
                  partitioner got, converted with echo_torch.convert) and
                  that torch's forward GraphModule also runs (ops only moved
                  to the backward run once: not recomputations; they are
                  counted as "moved").

Frontiers (per model; x = extra roofline %, y = MiB held for backward):
the torch series is {torch default, torch budget B}; the Echo series is
{Echo AUTO @ peak(B), Echo AUTO 0-30%, Echo AUTO stash points, Echo ECHO}.
A series' frontier is
F(x) = min{y_p : p in series, x_p <= x} (its lower-left staircase).

  "Echo's frontier is at or below torch's" means: every torch point T is
  weakly dominated by some Echo point E, i.e. x_E <= x_T + 0.1 (percentage
  points, what counts as equal extra compute) and y_E <= y_T + 1 KiB;
  equivalently F_echo(x_T + 0.1) <= y_T + 1 KiB at every torch point: for
  any memory level torch reaches at some extra compute, Echo reaches the same
  or less with no more extra compute, so Echo's staircase never lies above
  torch's at a torch point. Torch points that no Echo point dominates are
  listed. The same test with the measured step peak in place
  of the saved bytes ("by step peak") is reported too: Echo's AUTO plans
  bound the step peak (memory_limit_bytes), not the saved bytes, and the two
  need not move together (a partition that saves less can peak higher).

Summary per model: Echo's best saved-bytes reduction vs eager among Echo
points with extra roofline <= 5%, against torch's best among torch points
with extra roofline <= 5% (the same extra-compute allowance).

Checks: each point's loss must equal eager's (torch.testing tolerance
rtol 1e-5, atol 1e-6; torch.manual_seed(0) before every step, so dropout
draws the same masks) and its gradients too (rtol 1e-4, atol 1e-6, as
test_models); a mismatch prints a WARNING. A torch budget point whose
partition equals an earlier torch point's (same saved bytes, same
recomputed ops) is flagged "same as <point>" ("no change" when that is the
default).

torch budget points on models with BatchNorm can fail in the backward: the
min-cut partition recomputes a batch norm in the backward and so saves its
running-stat buffers, which AOTAutograd then updates in place after the
forward ("modified by an inplace operation"; torch's own boxed compilers
fail the same way). Such a point is retried with the saved buffers cloned in
the forward (_clone_saved_buffers, a few KiB) and marked; points that still
fail are listed as failed, with their Echo @ peak(B) point.

Output: one markdown table per model, the two frontiers and a summary line
each on stdout; with --out DIR also DIR/results.json, DIR/frontier.md,
DIR/frontier.png (one subplot per model, y = MiB held for backward) and
DIR/frontier_peak.png (y = measured step peak). --render DIR rewrites
frontier.md and the plots from DIR/results.json without measuring.

Runtime: all five models at CI size take about 10 minutes on a shared 2-core
machine (NMT and DeepSpeech2 about 4 minutes each), most of it the 14
captures per model.
"""
import argparse
import collections
import json
import os
import sys
import time
import warnings

import torch

import harness
import models
import servers
from echo_torch import optimize, proto, report

import peers
from echo_torch import capture as capture_lib
from echo_torch.convert import JointGraph, convert
from echo_torch.plan_cache import PlanCache
from echo_torch.planners import PlanRequestOptions, ServerPlanner

from frontier_report import (BUDGETS, DEVICE, ECHO_MORE_OVERHEADS, ECHO_OVERHEAD, MIB,
                             frontier_lines,
                             frontier_summary, model_table, summary_line,
                             write_outputs)

_pl = proto.planner_pb2
_g = proto.graph_pb2


def log(line):
    print(line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- roofline


class Roofline:
    """Roofline times on DEVICE from echod's cost model (EstimateMemory's
    compute_time_seconds)."""

    def __init__(self, client):
        self.client = client
        self._full = {}

    def _time(self, graph):
        request = _pl.EstimateMemoryRequest(graph=graph)
        request.device.name = DEVICE
        return self.client.estimate_memory(request).compute_time_seconds

    def full(self, graph):
        key = id(graph)
        if key not in self._full:
            self._full[key] = (graph, self._time(graph))
        return self._full[key][1]

    def of_ops(self, graph, op_indices):
        """Time of one execution of each listed op (repeats allowed)."""
        if not op_indices:
            return 0.0
        return self._time(subset_graph(graph, op_indices))


def subset_graph(graph, op_indices):
    """An echo graph with a copy of graph.ops[i] per listed index (unique op
    and output ids), plus the tensors they read (no producer) and write."""
    tensors = {t.id: t for t in graph.tensors}
    # The batch marks stay valid: the same batch size.
    sub = _g.Graph(name=f"{graph.name}-recomputed", batch_size=graph.batch_size)
    added = set()
    for k, index in enumerate(op_indices):
        op = graph.ops[index]
        copy = sub.ops.add()
        copy.CopyFrom(op)
        copy.id = copy.name = f"{op.id}#{k}"
        del copy.output_ids[:]
        for tid in op.input_ids:
            if tid not in added and tid in tensors:
                added.add(tid)
                sub.tensors.add().CopyFrom(tensors[tid])
        for tid in op.output_ids:
            new = sub.tensors.add()
            new.CopyFrom(tensors[tid])
            new.id = new.name = f"{tid}#{k}"
            copy.output_ids.append(new.id)
    # Inputs keep their ids and have no producer here (graph inputs); the
    # roofline cost of an op depends on its own flops and tensor bytes only.
    return sub


# ---------------------------------------------------------------- steps


def step_flops(wrapped, model, inputs, seed=0):
    from torch.utils.flop_counter import FlopCounterMode
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with FlopCounterMode(display=False) as counter:
        loss = wrapped(*inputs)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def measure_point(model, wrapped, inputs):
    """harness.run_step (warm-up/capture, peak step, saved forward), then a
    FLOP-counted step."""
    result = harness.run_step(model, wrapped, inputs, seed=0)
    flops = step_flops(wrapped, model, inputs)
    model.zero_grad(set_to_none=True)
    return result, flops


def _clone_saved_buffers(fw, primals, num_fwd_outputs):
    """Workaround for min-cut partitions that save a buffer primal (BatchNorm
    running stats, read by a recomputed batch norm) for the backward:
    AOTAutograd's runtime then updates the buffer in place after the forward,
    and autograd rejects the saved tensor in the backward ("modified by an
    inplace operation"). The forward saves a clone (taken before the update)
    instead. Returns how many saved outputs were cloned."""
    placeholders = [n for n in fw.graph.nodes if n.op == "placeholder"]
    buffers = {n for n, info in zip(placeholders, primals) if info.kind == "buffer"}
    output = next(n for n in fw.graph.nodes if n.op == "output")
    values = list(output.args[0])
    cloned = 0
    for i, value in enumerate(values):
        if i >= num_fwd_outputs and value in buffers:
            with fw.graph.inserting_before(output):
                clone = fw.graph.call_function(torch.ops.aten.clone.default, (value,))
            clone.meta = dict(value.meta)
            values[i] = clone
            cloned += 1
    output.args = (tuple(values),)
    fw.recompile()
    return cloned


def torch_point(model, inputs, budget, clone_saved_buffers=False):
    """min-cut partition under activation_memory_budget=budget (None: the
    default). Returns (StepResult, flops, record) where record has the
    converted joint, fw and bw GraphModules and the names of fw's ops.
    clone_saved_buffers: apply _clone_saved_buffers to the partition."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    primals = capture_lib.module_primals(model, inputs, {})
    record = {}

    def partition_fn(joint_module, joint_inputs, *, num_fwd_outputs, **kw):
        # Convert before partitioning: the partitioner may edit the joint.
        record["converted"] = convert(JointGraph(joint_module, num_fwd_outputs, primals,
                                                 name=type(model).__name__))
        fw, bw = min_cut_rematerialization_partition(
            joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kw)
        record["fw"], record["bw"] = fw, bw
        record["fw_names"] = {n.name for n in fw.graph.nodes if n.op == "call_function"}
        if clone_saved_buffers:
            record["cloned_buffers"] = _clone_saved_buffers(fw, primals, num_fwd_outputs)
        return fw, bw

    wrapped = peers.mincut_module(model, partition_fn)
    if budget is None:
        result, flops = measure_point(model, wrapped, inputs)
    else:
        with torch._functorch.config.patch(activation_memory_budget=budget):
            result, flops = measure_point(model, wrapped, inputs)
    return result, flops, record


def torch_recomputed(record):
    """Op indices (into the converted joint) torch's backward recomputes,
    and the forward ops it only moved to the backward."""
    converted = record["converted"]
    forward_ops = {op.id: i for i, op in enumerate(converted.graph.ops)
                   if op.phase == _g.PHASE_FORWARD}
    fw_names = record["fw_names"]  # before any workaround added ops
    bw_names = [n.name for n in record["bw"].graph.nodes if n.op == "call_function"]
    recomputed = [forward_ops[n] for n in bw_names if n in forward_ops and n in fw_names]
    moved = [forward_ops[n] for n in bw_names if n in forward_ops and n not in fw_names]
    return recomputed, moved


class RecordingPlanner:
    """A ServerPlanner that keeps the plans it made (their schedules)."""

    def __init__(self, inner):
        self.inner = inner
        self.plans = []

    def plan(self, converted):
        plan = self.inner.plan(converted)
        self.plans.append(plan)
        return plan


def echo_point(model, inputs, client, policy, memory_limit_bytes=None,
               max_overhead_ratio=None, objective="peak_bytes", use_cache=False):
    options = PlanRequestOptions(policy=policy, memory_limit_bytes=memory_limit_bytes,
                                 max_overhead_ratio=max_overhead_ratio, device=DEVICE,
                                 allocator_rounding_bytes=0, objective=objective)
    planner = RecordingPlanner(ServerPlanner(client, options,
                                             PlanCache() if use_cache else None))
    wrapped = optimize(model, planner=planner, on_error="raise")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, flops = measure_point(model, wrapped, inputs)
    for w in caught:
        if "echo_torch" in str(w.message):
            log(f"    {w.message}")
    plan = planner.plans[-1]
    recomputed = [i for i, rec in plan.schedule if rec]
    return result, flops, wrapped, recomputed


# ---------------------------------------------------------------- one model


def same_training(result, eager):
    """(loss matches, grads match, max |grad difference|) against eager, at
    the model suite's tolerances (tests/python/test_models.py)."""
    try:
        torch.testing.assert_close(result.loss, eager.loss, rtol=1e-5, atol=1e-6)
        loss_ok = True
    except AssertionError:
        loss_ok = False
    grads_ok = True
    for got, want in zip(result.grads, eager.grads):
        if want is None:
            continue
        try:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
        except (AssertionError, TypeError):
            grads_ok = False
    return loss_ok, grads_ok, harness.max_grad_diff(result, eager)


def build_model(name):
    if name == "nmt-paper":
        torch.manual_seed(0)
        return models.NMT(models.NMT_PAPER)
    return models.build(name)


def bench_model(name, client, roofline, use_cache=False, device="cpu"):
    model = build_model(name).to(device)
    inputs = tuple(x.to(device) for x in models.example_inputs(model))
    started = time.perf_counter()
    points = []

    def add(label, kind, result, flops, graph, recomputed, moved=(), **extra):
        loss_ok, grads_ok, grad_diff = same_training(result, eager)
        full = roofline.full(graph)
        extra_time = roofline.of_ops(graph, list(recomputed))
        point = dict(label=label, kind=kind, saved_bytes=int(result.saved_bytes),
                     peak_bytes=int(result.peak_bytes), flops=flops,
                     loss=float(result.loss.item()), loss_matches_eager=loss_ok,
                     grads_match_eager=grads_ok, max_grad_diff=grad_diff,
                     recompute_executions=len(recomputed), moved_ops=len(moved),
                     recomputed_op_types=dict(collections.Counter(
                         graph.ops[i].op_type for i in recomputed)),
                     roofline_full_seconds=full, roofline_recomputed_seconds=extra_time,
                     extra_roofline_pct=100.0 * extra_time / full if full else 0.0,
                     recomputed_names=sorted({graph.ops[i].id for i in recomputed}),
                     **extra)
        points.append(point)
        log(f"  [{name}] {label}: saved {point['saved_bytes'] / MIB:.3f} MiB, peak "
            f"{point['peak_bytes'] / MIB:.3f} MiB, {len(recomputed)} recomputed, extra "
            f"roofline {point['extra_roofline_pct']:.2f}% "
            f"({time.perf_counter() - started:.0f} s)")
        return point

    # Eager; its roofline reference is the joint graph of the default
    # partition's capture (the same trace: the plain step).
    eager, eager_flops = measure_point(model, model, inputs)

    def failed(label, series, error):
        model.zero_grad(set_to_none=True)
        message = " ".join(f"{type(error).__name__}: {error}".split())[:300]
        points.append(dict(label=label, kind="failed", series=series, error=message))
        log(f"  [{name}] {label}: FAILED: {message}")

    # torch: default partition and the budgets.
    torch_results = {}
    plain_graph = None
    for budget in (None,) + BUDGETS:
        label = "torch default" if budget is None else f"torch budget {budget}"
        workaround = {}
        try:
            try:
                result, flops, record = torch_point(model, inputs, budget)
            except RuntimeError as error:
                if "modified by an inplace operation" not in str(error):
                    raise
                # A saved BatchNorm buffer (see _clone_saved_buffers): say so
                # and measure the partition with the buffers cloned.
                model.zero_grad(set_to_none=True)
                message = " ".join(str(error).split())[:160]
                log(f"  [{name}] {label}: fails as is ({message}); retrying with the saved "
                    "buffers cloned")
                result, flops, record = torch_point(model, inputs, budget,
                                                    clone_saved_buffers=True)
                workaround = dict(workaround="saved buffers cloned",
                                  cloned_buffers=record.get("cloned_buffers", 0),
                                  error_as_is=message)
        except Exception as error:  # noqa: BLE001 - a point that fails is reported
            failed(label, "torch", error)
            continue
        recomputed, moved = torch_recomputed(record)
        if plain_graph is None:
            plain_graph = record["converted"].graph
            add("eager", "eager", eager, eager_flops, plain_graph, [])
            points.insert(0, points.pop())
            log(f"  [{name}] joint graph: {len(plain_graph.ops)} ops")
        point = add(label, "torch", result, flops, record["converted"].graph, recomputed,
                    moved, budget=1.0 if budget is None else budget, **workaround)
        torch_results[budget] = point
        del record
    if plain_graph is None:  # every torch point failed
        from echo_torch import capture_graph
        plain_graph = capture_graph(model, *inputs).graph
        add("eager", "eager", eager, eager_flops, plain_graph, [])
        points.insert(0, points.pop())

    # Echo: AUTO at the torch points' measured peaks (the default's too),
    # AUTO at 5% extra compute, ECHO.
    runs = []
    for budget in (None,) + BUDGETS:
        tag = 1.0 if budget is None else budget
        if budget not in torch_results:
            points.append(dict(label=f"Echo AUTO @ peak({tag})", kind="failed", series="echo",
                               error=f"no limit: torch budget {tag} failed"))
            continue
        limit = torch_results[budget]["peak_bytes"]
        runs.append((f"Echo AUTO @ peak({tag})", "AUTO", dict(memory_limit_bytes=limit)))
    for overhead in (0.0, ECHO_OVERHEAD) + ECHO_MORE_OVERHEADS:
        runs.append((f"Echo AUTO {100 * overhead:g}%", "AUTO",
                     dict(max_overhead_ratio=overhead)))
    # The stash objective (what torch's budget minimizes) at 5% and at the
    # extra compute each torch budget spent: the same-compute comparison.
    stash_overheads = {ECHO_OVERHEAD: f"Echo AUTO stash {100 * ECHO_OVERHEAD:g}%"}
    for budget, point in torch_results.items():
        extra = round(point["extra_roofline_pct"] / 100, 6)
        if extra > 0 and extra not in stash_overheads:
            stash_overheads[extra] = f"Echo AUTO stash @ extra({budget or 1.0})"
    for overhead, label in sorted(stash_overheads.items()):
        runs.append((label, "AUTO", dict(max_overhead_ratio=overhead,
                                         objective="stash_bytes")))
    runs.append(("Echo ECHO", "ECHO", {}))
    for label, policy, options in runs:
        try:
            result, flops, wrapped, recomputed = echo_point(model, inputs, client, policy,
                                                            use_cache=use_cache, **options)
        except Exception as error:  # noqa: BLE001
            failed(label, "echo", error)
            continue
        add(label, "echo", result, flops, wrapped.converted.graph, recomputed,
            **_echo_extra(wrapped, **options))

    # Derived numbers and checks.
    eager_point = points[0]
    default = torch_results.get(None)
    warnings_out = [f"FAILED [{name}] {p['label']}: {p['error']}" for p in points
                    if p["kind"] == "failed"]
    for p in points:
        if p["kind"] == "failed":
            continue
        p["saved_reduction_pct"] = (100.0 * (1 - p["saved_bytes"] / eager_point["saved_bytes"])
                                    if eager_point["saved_bytes"] else 0.0)
        p["extra_flops_pct"] = (100.0 * (p["flops"] - eager_flops) / eager_flops
                                if eager_flops else 0.0)
        if not p["loss_matches_eager"]:
            warnings_out.append(f"WARNING [{name}] {p['label']}: loss {p['loss']!r} != eager "
                                f"{eager_point['loss']!r}")
        elif not p["grads_match_eager"]:
            warnings_out.append(f"WARNING [{name}] {p['label']}: gradients differ from eager's "
                                f"(max |diff| {p['max_grad_diff']:.3g})")
        if p["kind"] == "torch" and p["label"] != "torch default" and default:
            p["no_change"] = (p["saved_bytes"] == default["saved_bytes"]
                              and p["recomputed_names"] == default["recomputed_names"])
            same = [q["label"] for q in points[:points.index(p)] if q["kind"] == "torch"
                    and q["saved_bytes"] == p["saved_bytes"]
                    and q["recomputed_names"] == p["recomputed_names"]]
            p["same_as"] = same[0] if same else None
            if same:
                warnings_out.append(f"NOTE [{name}] {p['label']}: same partition as "
                                    f"{same[0]}" + (" (no change)" if p["no_change"] else ""))
        if p.get("workaround"):
            warnings_out.append(f"NOTE [{name}] {p['label']}: fails as torch partitions it "
                                f"({p['error_as_is']}); measured with the "
                                f"{p['cloned_buffers']} saved buffers cloned")
        if p["kind"] == "echo" and p.get("feasible") is False:
            warnings_out.append(
                f"NOTE [{name}] {p['label']}: echod says the limit "
                f"{p['options']['memory_limit_bytes'] / MIB:.3f} MiB is infeasible (planned "
                f"peak {p['planned_peak_bytes'] / MIB:.3f} MiB, no schedule below "
                f"{p['peak_lower_bound_bytes'] / MIB:.3f} MiB by its model)")
    for line in warnings_out:
        print(line, flush=True)
    return dict(model=name, ops=len(plain_graph.ops), eager_flops=eager_flops,
                seconds=time.perf_counter() - started, points=points,
                notes=warnings_out, **frontier_summary(points))


def _echo_extra(wrapped, **options):
    rep = report(wrapped)
    return dict(options=options, feasible=rep.feasible, planned_peak_bytes=rep.planned_peak_bytes,
                peak_lower_bound_bytes=rep.peak_lower_bound_bytes,
                stash_lower_bound_bytes=rep.stash_lower_bound_bytes,
                planned_saved_bytes=rep.planned_saved_bytes,
                predicted_overhead_pct=(100.0 * rep.predicted_extra_compute_ratio
                                        if rep.predicted_extra_compute_ratio is not None else None),
                plan_source=rep.source)


# ---------------------------------------------------------------- frontier


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="a running echod (default: start one)")
    parser.add_argument("--models", default="nmt,deepspeech2,transformer,resnet50,gpt",
                        help="comma-separated, from " + ",".join(models.MODEL_NAMES + ("nmt-paper",)))
    parser.add_argument("--nmt-paper", action="store_true",
                        help="also the NMT at models.NMT_PAPER size (slow)")
    parser.add_argument("--out", help="write results.json, frontier.md, frontier.png here")
    parser.add_argument("--cuda", action="store_true",
                        help="run the models on the GPU (peaks: torch.cuda.max_memory_allocated)")
    parser.add_argument("--plan-cache", action="store_true",
                        help="use echo_torch's plan cache on disk for Echo plans")
    parser.add_argument("--render", metavar="DIR",
                        help="only rewrite DIR's frontier.md and plots (and the summaries "
                        "in results.json) from DIR/results.json; measures nothing")
    args = parser.parse_args(argv)
    if args.render:
        with open(os.path.join(args.render, "results.json")) as f:
            data = json.load(f)
        for res in data["models"]:
            res.update(frontier_summary(res["points"]))
        write_outputs(args.render, data["models"], data["meta"]["seconds"],
                      data["meta"].get("complete", True), data["meta"])
        for res in data["models"]:
            print(f"- {summary_line(res)}")
        return 0
    torch.set_num_threads(2)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for n in names:
        if n not in models.MODEL_NAMES + ("nmt-paper",):
            parser.error(f"unknown model {n!r}")
    if args.cuda and not torch.cuda.is_available():
        parser.error("--cuda: torch sees no GPU")
    if args.nmt_paper:
        names.append("nmt-paper")

    started = time.perf_counter()
    results = []
    with servers.planner_client(args.server, timeout_seconds=600) as client:
        roofline = Roofline(client)
        for name in names:
            log(f"[{name}] ...")
            res = bench_model(name, client, roofline, use_cache=args.plan_cache,
                              device="cuda" if args.cuda else "cpu")
            results.append(res)
            for line in [""] + model_table(res) + [""] + frontier_lines(res) + [
                    "", summary_line(res), ""]:
                print(line, flush=True)
            if args.out:  # after every model, so a long run leaves partial results
                write_outputs(args.out, results, time.perf_counter() - started,
                              complete=len(results) == len(names))
    total = time.perf_counter() - started
    print("## Summary\n")
    for res in results:
        print(f"- {summary_line(res)}")
    print(f"\n({total:.0f} s)")
    if args.out:
        print(f"wrote {args.out}/results.json, frontier.md, frontier.png, frontier_peak.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
