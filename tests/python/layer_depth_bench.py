#!/usr/bin/env python3
"""The paper's second claim, asked the way a cluster scheduler would: the
deepest model that fits a device at a fixed batch, without recomputation and
with AUTO at <= 5% and <= 20% extra compute.

  build/venv/bin/python tests/python/layer_depth_bench.py \
      [--models transformer,resnet] [--devices rtx-2080-ti,a100-80gb] \
      [--max-depth transformer=160,resnet=256] [--server HOST:PORT] [--json out.json] \
      [--cache-dir DIR] [--given MODEL:DEVICE:QUESTION=DEPTH ...] \
      [--chunking auto|off] [--questions plain,0.05,0.2]

Without --server it starts build/bin/echod (or $ECHO_ECHOD) on a free port.

Models (tests/python/models.py), fp32, at the batch the question is asked at:
  transformer  TransformerEncoder at models.TRANSFORMER_PAPER (batch 32,
               sequence 128, d_model 512, 8 heads, FFN 2048, vocabulary
               32000: Transformer-base), depth = encoder layers;
  resnet       models.ResNet50 at 224x224, 1000 classes, batch 32, with
               stages (3, 4, n, 3): the ResNet-50/101/152 family grows the
               third stage (n = 6, 23, 36); depth = n, and the table's layers
               are 3 * (10 + n) + 2 (ResNet-50: 50).

Capture: the hook's own capture and converter (echo_torch.capture.
capture_module + echo_torch.convert.convert, what echo_torch.capture_graph
runs) at the target batch, stopped right after the conversion: AOTAutograd
traces the joint forward/backward graph with fake tensors, so the batch costs
no compute and the step itself is not run (capture_graph would run it once
and measure per-op CPU workspace, which says nothing about a GPU's; the
graphs here carry no workspace). Graphs are cached per (model, depth).

Why not a small batch scaled by echod: the answer is the same (the hook marks
folded batch axes such as [batch*seq, d]; echo_torch/batch_dim.py), and the
capture costs the same at any batch, since it traces with fake tensors. The
benchmark measures the gap once per model: FindMaxBatchSize(min = max =
target batch) on the graph captured at batch 2 against EstimateMemory on the
graph captured at the target batch.

Questions, per captured depth and device: CheckFit(graph, device,
max_overhead_ratio = 0.05, and 0.20, reserved_bytes) answers "fits without
recomputation" and "fits with AUTO within the ratio". reserved_bytes: the
benchmark's allowance, 500 MiB + 5% of device memory (CUDA context, library
handles, allocator fragmentation), set on every request so that answers
compare across runs (echod's default when unset, 512 MiB + 5%, came later). Each answer's depth is found by galloping (1, 2, 4, ...; the
plain peak, linear in depth, jumps to where its line through the last two
depths crosses the usable memory) from the deepest depth already known to
fit, then bisection, on the assumption
that fitting is monotone in depth; answers already known for a depth are
reused across the six questions; in a bracket, the depth where the peaks
(plain, or AUTO's lowest within the ratio, as CheckFit reports them) cross
the usable memory is probed with its neighbour before a bisection step
(Bench.deepest). At the answers for 20%, an AUTO plan with
memory_limit_bytes = device - reserved (GenerateRecomputePlan) is asked too
as a cross-check (its replayed peak and extra compute).

Every RPC here is cold: graphs are sent inline (echod caches answers only
to requests by fingerprint), and no question repeats a (graph, device,
ratio).
"""
import argparse
import dataclasses
import json
import os
import resource
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models  # noqa: E402
import servers  # noqa: E402
from echo_torch import capture as capture_lib  # noqa: E402
from echo_torch import proto  # noqa: E402
from echo_torch.convert import convert  # noqa: E402

_pl = proto.planner_pb2
_dev = proto.device_pb2

MiB = 1 << 20
GiB = 1 << 30
RATIOS = (0.05, 0.20)
PAPER = {"transformer": 1.83, "resnet": 4.0}
BATCH = {"transformer": 32, "resnet": 32}


def reserved_bytes(memory_bytes):
    """The benchmark's allowance for the CUDA context, library handles and
    allocator fragmentation: 500 MiB + 5% of the device's memory."""
    return 500 * MiB + memory_bytes // 20


def layers_of(model, depth):
    """What the paper counts: Transformer encoder layers; ResNet layers
    (convolutions on the main path and the classifier)."""
    return depth if model == "transformer" else 3 * (10 + depth) + 2


def build(model, depth, batch):
    """The model with uninitialized parameters: built on the meta device and
    given CPU storage that is never written (the capture traces with fake
    tensors and reads no values), so a 1,000-layer Transformer-base (12.6 GB
    of fp32 parameters) does not commit that memory."""
    torch.manual_seed(0)
    with torch.device("meta"):
        if model == "transformer":
            cfg = dataclasses.replace(models.TRANSFORMER_PAPER, batch=batch, layers=depth)
            m = models.TransformerEncoder(cfg)
        elif model == "resnet":
            m = models.ResNet50(batch=batch, image=224, classes=1000, stages=(3, 4, depth, 3))
        else:
            raise ValueError(model)
    m = m.to_empty(device="cpu")
    return m, models.example_inputs(m)


class _Converted(Exception):
    pass


def capture(model, depth, batch):
    """The converted joint graph (echo.v1.Graph) of one training step, from
    the hook's capture and converter; the step is not run."""
    m, inputs = build(model, depth, batch)
    out = {}

    def partitioner(joint):
        out["graph"] = convert(joint).graph
        raise _Converted()

    fn = capture_lib.capture_module(m, partitioner, inputs, {}, "eager")
    try:
        with torch.enable_grad():
            fn(*inputs)
    except _Converted:
        pass
    if "graph" not in out:
        raise RuntimeError(f"{model} depth {depth}: the capture did not reach the converter")
    return out["graph"]


class Bench:
    def __init__(self, client, devices, cache_dir=None, chunking=_pl.CHUNKING_MODE_AUTO):
        self.client = client
        self.chunking = chunking  # every CheckFit and plan asks it
        self.cache_dir = cache_dir
        self.stub = client._stub
        self.devices = devices  # name -> memory bytes
        self.graphs = {}        # (model, depth) -> (graph, capture seconds)
        self.fit = {}           # (model, depth, device, ratio) -> CheckFitResponse
        self.rpcs = []          # dicts: method, model, depth, device, ops, seconds
        self.capture_seconds = 0.0  # this run's captures
        self.loaded = set()  # (model, depth) read from cache_dir

    def rpc(self, method, request, **labels):
        start = time.perf_counter()
        response = self.client._call(getattr(self.stub, method), method, request)
        self.rpcs.append(dict(method=method, seconds=time.perf_counter() - start, **labels))
        return response

    def graph(self, model, depth):
        key = (model, depth)
        if key not in self.graphs:
            path = (os.path.join(self.cache_dir, f"{model}_d{depth}_b{BATCH[model]}.binpb")
                    if self.cache_dir else None)
            if path and os.path.exists(path):
                with open(path, "rb") as f:
                    g = proto.graph_pb2.Graph.FromString(f.read())
                with open(path + ".seconds") as f:
                    seconds = float(f.read())
                self.graphs[key] = (g, seconds)
                self.loaded.add(key)
                print(f"  loaded {model} depth {depth}: {len(g.ops)} ops from {path} "
                      f"(captured in {seconds:.1f} s)", flush=True)
                return g
            start = time.perf_counter()
            g = capture(model, depth, BATCH[model])
            seconds = time.perf_counter() - start
            self.capture_seconds += seconds
            self.graphs[key] = (g, seconds)
            print(f"  captured {model} depth {depth}: {len(g.ops)} ops in {seconds:.1f} s",
                  flush=True)
            if path:
                os.makedirs(self.cache_dir, exist_ok=True)
                with open(path + ".tmp", "wb") as f:
                    f.write(g.SerializeToString())
                with open(path + ".seconds", "w") as f:
                    f.write(f"{seconds}\n")
                os.replace(path + ".tmp", path)
        return self.graphs[key][0]

    def check(self, model, depth, device, ratio):
        key = (model, depth, device, ratio)
        if key not in self.fit:
            g = self.graph(model, depth)
            request = _pl.CheckFitRequest(graph=g, device=_dev.DeviceSpec(name=device),
                                          max_overhead_ratio=ratio,
                                          reserved_bytes=reserved_bytes(self.devices[device]),
                                          chunking=self.chunking)
            self.fit[key] = self.rpc("CheckFit", request, model=model, depth=depth,
                                     device=device, ratio=ratio, ops=len(g.ops))
        return self.fit[key]

    def fits(self, model, depth, device, ratio):
        """ratio None: without recomputation (CheckFit's fits_without_recompute
        at the smallest ratio)."""
        if ratio is None:
            return self.check(model, depth, device, RATIOS[0]).fits_without_recompute
        return self.check(model, depth, device, ratio).fits

    def level(self, model, depth, device, ratio):
        """What the answer rests on, as a value that crosses a threshold at the
        deepest fit: plain, the peak (threshold: the usable memory); with a
        ratio, CheckFit's AUTO plan under the usable memory (least extra
        compute under it) and its extra compute (threshold: the ratio), 0 when
        the plain peak fits, None when no plan gets under the memory."""
        response = self.check(model, depth, device, RATIOS[0] if ratio is None else ratio)
        if ratio is None:
            return response.baseline_peak_bytes
        if response.fits_without_recompute:
            return 0.0
        usable = self.devices[device] - reserved_bytes(self.devices[device])
        if response.planned_peak_bytes > usable:
            return None
        return response.recompute_overhead_ratio

    def known(self, model, device, ratio):
        """Depths already answered for this question: (deepest yes, shallowest no)."""
        yes, no = 0, None
        for (m, d, dev, r), response in self.fit.items():
            if m != model or dev != device:
                continue
            if ratio is None:
                answer = response.fits_without_recompute
            elif r == ratio:
                answer = response.fits
            else:
                continue
            if answer:
                yes = max(yes, d)
            else:
                no = d if no is None else min(no, d)
        return yes, no

    def crossing(self, model, device, ratio, a, b):
        """The depth where the line through the levels at depths a < b
        reaches the threshold (floor), or None."""
        threshold = (self.devices[device] - reserved_bytes(self.devices[device])
                     if ratio is None else ratio)
        la, lb = self.level(model, a, device, ratio), self.level(model, b, device, ratio)
        if la is None or lb is None or lb <= la:
            return None
        return a + int((threshold - la) * (b - a) // (lb - la))

    def deepest(self, model, device, ratio, max_depth, floor=0):
        """The largest depth in [1, max_depth] that fits (0: none), and
        whether max_depth itself fits (the answer is then a lower bound).
        floor: a depth known to fit (a less constrained question's answer).

        Galloping (doubling) from the deepest depth known to fit, but
        probing just above the depth where the level (Bench.level: the peak,
        or AUTO's extra compute), extrapolated from the last two depths that
        fit, reaches its threshold: for the plain peak, linear in depth,
        wherever that is; for AUTO only when it is closer; then, in the
        bracket, the interpolated crossing and its neighbour, then one
        bisection step, until the bracket closes. Captures cost time in
        proportion to depth, and peaks are linear in depth, so this needs few
        of them."""
        lo, hi = self.known(model, device, ratio)
        lo = max(lo, floor)
        if hi is not None and hi <= lo:
            hi = None  # an inconsistent answer (AUTO is a heuristic): search above lo
        if lo == 0:
            if not self.fits(model, 1, device, ratio):
                return 0, False
            lo = 1
        prev = None
        if lo > 1:  # a shallower depth already captured anchors the extrapolation
            for d in sorted((d for m, d in self.graphs if m == model and d < lo), reverse=True):
                if self.fits(model, d, device, ratio):
                    prev = d
                    break
        while hi is None:
            if lo >= max_depth:
                return max_depth, True
            d = min(2 * lo, max_depth)
            if prev is not None:
                guess = self.crossing(model, device, ratio, prev, lo)
                # Plain peaks are linear in depth: jump to where the line
                # crosses (the bracket below confirms it). AUTO's extra
                # compute is not: only probe its crossing when it is closer.
                if guess is not None and lo < guess + 1 and (ratio is None or guess + 1 < d):
                    d = min(guess + 1, max_depth)
            if self.fits(model, d, device, ratio):
                prev, lo = lo, d
            else:
                hi = d
        while hi - lo > 1:
            guess = self.crossing(model, device, ratio, lo, hi)
            g = min(max(guess if guess is not None else (lo + hi) // 2, lo + 1), hi - 1)
            if self.fits(model, g, device, ratio):
                lo = g
                if g + 1 < hi:
                    if self.fits(model, g + 1, device, ratio):
                        lo = g + 1
                    else:
                        hi = g + 1
            else:
                hi = g
                if g - 1 > lo:
                    if self.fits(model, g - 1, device, ratio):
                        lo = g - 1
                    else:
                        hi = g - 1
            if hi - lo > 1:
                mid = (lo + hi) // 2
                if self.fits(model, mid, device, ratio):
                    lo = mid
                else:
                    hi = mid
        return lo, False


def batch_scaling_gap(bench, model, depth):
    """Peak at the target batch: echod scaling the hook's batch-2 graph
    (FindMaxBatchSize with min = max = target on a100-80gb) vs EstimateMemory
    of the graph captured at the target batch."""
    target = BATCH[model]
    small = capture(model, depth, 2)
    request = _pl.FindMaxBatchSizeRequest(graph=small, device=_dev.DeviceSpec(name="a100-80gb"),
                                          max_overhead_ratio=0.0, min_batch_size=target,
                                          max_batch_size=target)
    scaled = bench.rpc("FindMaxBatchSize", request, model=model, depth=depth,
                       device="a100-80gb", ops=len(small.ops))
    g = bench.graph(model, depth)
    exact = bench.rpc("EstimateMemory", _pl.EstimateMemoryRequest(graph=g), model=model,
                      depth=depth, device="", ops=len(g.ops))
    return dict(model=model, depth=depth, small_batch=small.batch_size, target=target,
                scaled_found=scaled.without_recompute.found,
                scaled_peak=scaled.without_recompute.peak_bytes, exact_peak=exact.peak_bytes)


def fmt_depth(model, depth, capped):
    if depth is None:
        return "not asked"
    if depth == 0:
        return "none"
    text = f"{layers_of(model, depth)}"
    if model == "resnet":
        text += f" (n={depth})"
    return (">=" if capped else "") + text


def raise_stack_limit(want=512 << 20):
    """torch's autograd recurses in C over the graph's depth: at 8 MiB of
    stack a 1,326-layer Transformer's capture dies in AOTAutograd's
    joint_helper (SIGSEGV, measured). The main thread's stack grows up to
    the soft limit read at each fault, so raising it here is enough."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_STACK, (want, hard))


def main():
    raise_stack_limit()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="transformer,resnet")
    parser.add_argument("--devices", default="rtx-2080-ti,a100-80gb")
    parser.add_argument("--max-depth", default="transformer=160,resnet=256",
                        help="search bound per model (encoder layers; ResNet stage-3 blocks)")
    parser.add_argument("--server", help="a running echod (default: start build/bin/echod)")
    parser.add_argument("--json", help="write the answers and RPC latencies here")
    parser.add_argument("--cache-dir", help="keep captured graphs here (binary echo.v1.Graph "
                        "per model, depth and batch) and reuse them on the next run")
    parser.add_argument("--given", action="append", default=[], metavar="MODEL:DEVICE:Q=DEPTH",
                        help="an answer found by an earlier run, not searched again (Q: plain, "
                        "0.05 or 0.2); later questions start from it, e.g. "
                        "transformer:a100-80gb:0.05=663; repeatable")
    parser.add_argument("--chunking", choices=("auto", "off"), default="auto",
                        help="whether AUTO may run the loss in chunks (CheckFit's and the "
                        "plans' chunking; default auto, as the hook plans)")
    parser.add_argument("--questions", default="plain,0.05,0.2",
                        help="the questions to answer, of plain, 0.05 and 0.2 (the others "
                        "print as not asked)")
    args = parser.parse_args()
    questions = {None if q == "plain" else float(q) for q in args.questions.split(",") if q}
    model_names = [m for m in args.models.split(",") if m]
    device_names = [d for d in args.devices.split(",") if d]
    max_depth = {k: int(v) for k, v in (kv.split("=") for kv in args.max_depth.split(","))}
    for m in model_names:
        if m not in PAPER:
            parser.error(f"unknown model {m!r}")
    given = {}  # (model, device, ratio or None) -> depth
    for item in args.given:
        try:
            key, depth = item.split("=")
            model, device, question = key.split(":")
            ratio = None if question == "plain" else float(question)
            if model not in PAPER or (ratio is not None and ratio not in RATIOS):
                raise ValueError
            given[(model, device, ratio)] = int(depth)
        except ValueError:
            parser.error(f"--given {item!r}: expected MODEL:DEVICE:QUESTION=DEPTH with "
                         f"QUESTION one of plain, {', '.join(map(str, RATIOS))}")
    torch.set_num_threads(1)
    started = time.perf_counter()

    with servers.planner_client(args.server, timeout_seconds=600) as client:
        info = client._call(client._stub.GetNodeInfo, "GetNodeInfo", _pl.GetNodeInfoRequest())
        catalog = {d.name: d.memory_bytes for d in info.device_catalog}
        for d in device_names:
            if d not in catalog:
                parser.error(f"unknown device {d!r}; catalog: {', '.join(sorted(catalog))}")
        bench = Bench(client, {d: catalog[d] for d in device_names}, args.cache_dir,
                      _pl.CHUNKING_MODE_AUTO if args.chunking == "auto"
                      else _pl.CHUNKING_MODE_OFF)
        rows, checks, gaps = [], [], []
        for model in model_names:
            for device in device_names:
                print(f"{model} on {device} (batch {BATCH[model]}, reserved "
                      f"{reserved_bytes(catalog[device]) / MiB:.0f} MiB):", flush=True)
                answers = {}
                floor = 0
                for ratio in (None,) + RATIOS:
                    source = ""
                    if (model, device, ratio) in given:
                        depth, capped = given[(model, device, ratio)], False
                        source = " (given: an earlier run's answer)"
                    elif ratio not in questions:
                        answers[ratio] = (None, False)
                        continue
                    else:
                        depth, capped = bench.deepest(model, device, ratio, max_depth[model],
                                                      floor)
                    answers[ratio] = (depth, capped)
                    floor = depth
                    print(f"  deepest {'plain' if ratio is None else f'AUTO <= {ratio:.0%}'}: "
                          f"{fmt_depth(model, depth, capped)}{source}", flush=True)
                rows.append(dict(model=model, device=device, answers=answers))
                depth = answers[RATIOS[-1]][0]
                if depth:
                    g = bench.graph(model, depth)
                    usable = catalog[device] - reserved_bytes(catalog[device])
                    plan = bench.rpc("GenerateRecomputePlan", _pl.GenerateRecomputePlanRequest(
                        graph=g, policy=_pl.RECOMPUTE_POLICY_AUTO,
                        device=_dev.DeviceSpec(name=device), memory_limit_bytes=usable,
                        chunking=bench.chunking),
                        model=model, depth=depth, device=device, ops=len(g.ops))
                    fit = bench.check(model, depth, device, RATIOS[-1])
                    checks.append(dict(model=model, device=device, depth=depth,
                                       usable=usable, plan_feasible=plan.feasible,
                                       plan_peak=plan.planned_peak_bytes,
                                       plan_overhead=plan.recompute_overhead_ratio,
                                       fit_peak=fit.planned_peak_bytes,
                                       fit_overhead=fit.recompute_overhead_ratio))
            plain = rows[-len(device_names)]["answers"][None][0]
            # A given plain answer was measured by the run that found it.
            if plain and (model, device_names[0], None) not in given:
                gaps.append(batch_scaling_gap(bench, model, plain))

    total = time.perf_counter() - started
    print()
    print("| model | device | batch | deepest plain | AUTO <= 5% | AUTO <= 20% | ratio 5% "
          "| ratio 20% | paper (2080 Ti) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        model, a = row["model"], row["answers"]
        plain = layers_of(model, a[None][0]) if a[None][0] else 0

        def ratio(r):
            d, capped = a[r]
            if not plain or not d or a[None][1]:
                return "—"
            text = f"{layers_of(model, d) / plain:.2f}x"
            return (">=" + text) if capped else text
        print(f"| {model} | {row['device']} | {BATCH[model]} | "
              f"{fmt_depth(model, *a[None])} | {fmt_depth(model, *a[0.05])} | "
              f"{fmt_depth(model, *a[0.2])} | {ratio(0.05)} | {ratio(0.2)} | "
              f"{PAPER[model]:.2f}x |")
    print()
    print("AUTO plan under the usable memory at the 20% answers (GenerateRecomputePlan "
          "vs CheckFit):")
    for c in checks:
        print(f"  {c['model']} {c['device']} depth {c['depth']}: usable "
              f"{c['usable'] / GiB:.2f} GiB; plan feasible={c['plan_feasible']} peak "
              f"{c['plan_peak'] / GiB:.2f} GiB, extra {c['plan_overhead']:.2%}; CheckFit "
              f"peak {c['fit_peak'] / GiB:.2f} GiB, extra {c['fit_overhead']:.2%}")
    print()
    print("Batch scaling of the hook's marking (batch 2 -> target, FindMaxBatchSize) vs "
          "captured at the target:")
    for gp in gaps:
        scaled = (f"{gp['scaled_peak'] / GiB:.2f} GiB" if gp["scaled_found"]
                  else "does not fit a100-80gb")
        print(f"  {gp['model']} depth {gp['depth']}: scaled {scaled}, captured "
              f"{gp['exact_peak'] / GiB:.2f} GiB")
    print()
    print("RPC latency (cold; client-side wall time, this loaded 2-core machine):")
    print("| RPC | calls | ops | median | max |")
    print("|---|---|---|---|---|")
    for method in ("CheckFit", "GenerateRecomputePlan", "FindMaxBatchSize", "EstimateMemory",
                   "GetNodeInfo"):
        calls = [r for r in bench.rpcs if r["method"] == method]
        if not calls:
            continue
        ops = [r["ops"] for r in calls]
        secs = [r["seconds"] for r in calls]
        print(f"| {method} | {len(calls)} | {min(ops)}–{max(ops)} | "
              f"{statistics.median(secs) * 1e3:.0f} ms | {max(secs) * 1e3:.0f} ms |")
    by_size = sorted((r for r in bench.rpcs if r["method"] == "CheckFit"),
                     key=lambda r: r["ops"])
    if by_size:
        # Issue 24's bar: the median CheckFit on the graphs over 50k ops.
        over = [r["seconds"] for r in by_size if r["ops"] > 50_000]
        if over:
            print(f"CheckFit on graphs over 50k ops: {len(over)} calls, median "
                  f"{statistics.median(over) * 1e3:.0f} ms, max {max(over) * 1e3:.0f} ms")
        big = by_size[-1]
        print(f"largest CheckFit: {big['model']} depth {big['depth']}, {big['ops']} ops, "
              f"{big['device']} at {big['ratio']:.0%}: {big['seconds'] * 1e3:.0f} ms")
    cached = sum(s for k, (_, s) in bench.graphs.items() if k in bench.loaded)
    print(f"graphs: {len(bench.graphs)} depths, {len(bench.loaded)} of them from --cache-dir "
          f"(captured earlier in {cached:.0f} s); this run's captures took "
          f"{bench.capture_seconds:.0f} s; "
          f"total {total:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows=[dict(model=r["model"], device=r["device"],
                                      answers={str(k): v for k, v in r["answers"].items()})
                                 for r in rows],
                           checks=checks, gaps=gaps, rpcs=bench.rpcs,
                           captures={f"{m}:{d}": s for (m, d), (_, s) in bench.graphs.items()},
                           total_seconds=total), f, indent=1)


if __name__ == "__main__":
    main()
