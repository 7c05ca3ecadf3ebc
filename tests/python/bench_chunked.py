#!/usr/bin/env python3
"""Chunked loss at the suite's paper sizes (issue 20's bar): per model,
eager's step, Echo AUTO within --ratio (default 5%) extra compute with
recompute only (chunking="off") and with chunked loss regions
(chunking="auto"). Per row: the measured step peak (the allocator's peak plus
the tensors that exist before the step, as harness.run_step measures it),
echod's predicted peak, the reduction against eager's measured peak, the
plan's predicted extra compute, the chunks, and the largest loss and
gradient differences from eager.

  build/venv/bin/python tests/python/bench_chunked.py [--models gpt transformer nmt]
      [--cuda] [--runs N] [--out FILE] [--size paper|ci] [--client_timing]

On the CPU, ops are priced on this CPU (echo_torch.host_cpu). --cuda runs on the GPU (peaks:
torch.cuda.max_memory_allocated; ops priced on the GPU's catalog entry, as
echo_torch.optimize does by default). --runs N also times N steps of each
row (the fastest counts) and adds AOTAutograd's plain partition, which runs
on the same op-by-op executor as Echo's plans without recomputing anything:
"measured extra" is a row's step time against it, so that the executor's
own cost is not counted as recomputation (against eager too, for what a
user sees). --client_timing adds each Echo row again with the ops priced by
times the hook takes here (client_timing=True; the label says how many ops
echod priced with them), to set the predicted extra compute beside the
measured one when the cost model's roofline is not the executor's. Starts build/bin/echod (or $ECHO_ECHOD) on a free port. Prints
one markdown table (and writes it to --out).
"""
import argparse
import dataclasses
import time
from typing import Optional

import torch

import harness
import models
import servers
import echo_torch

MIB = 2**20
PAPER = ("gpt", "transformer", "nmt")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(PAPER))
    parser.add_argument("--ratio", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cuda", action="store_true", help="run the models on the GPU")
    parser.add_argument("--runs", type=int, default=0,
                        help="time N steps of each row (the fastest counts)")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--size", choices=("paper", "ci"), default="paper",
                        help="the models' sizes (ci: models.build's, for a quick check)")
    parser.add_argument("--client_timing", action="store_true",
                        help="also plan each Echo row with the ops timed here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.cuda and not torch.cuda.is_available():
        parser.error("--cuda: torch sees no GPU")
    device = "cuda" if args.cuda else "cpu"
    timed = {"timing_runs": args.runs}
    rows = []
    with servers.Echod() as echod:
        for name in args.models:
            torch.manual_seed(0)
            model = (models.build_paper if args.size == "paper" else models.build)(name)
            model = model.to(device)
            inputs = tuple(x.to(device) for x in models.example_inputs(model))
            started = time.perf_counter()
            eager = harness.eager(model, inputs, **timed)
            rows.append(Row(name, "eager", eager, None, eager))
            plain = None
            if args.runs:  # the executor's own step, the timing reference
                plain = harness.aot_plain(model, inputs, **timed)
                rows.append(Row(name, "AOT plain (same executor)", plain, None, eager))
            for client_timing in (False, True) if args.client_timing else (False,):
                for chunking in ("off", "auto"):
                    wrapped = echo_torch.optimize(
                        model, server=echod.address, max_overhead_ratio=args.ratio,
                        chunking=chunking, plan_cache=False, on_error="raise",
                        client_timing=client_timing)
                    result = harness.run_step(model, wrapped, inputs, **timed)
                    rep = echo_torch.report(wrapped)
                    label = f"Echo AUTO {100 * args.ratio:g}%, chunking {chunking}"
                    if client_timing:
                        label += f", client times ({rep.measured_ops}/{rep.ops} ops)"
                    rows.append(Row(name, label, result, rep, eager, plain))
            del model, inputs, wrapped
            if args.cuda:
                torch.cuda.empty_cache()
            print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    where = (f"CUDA, {torch.cuda.get_device_name()}" if args.cuda else "CPU") + \
        f", torch {torch.__version__}"
    lines = table(rows, args.runs)
    priced = (echo_torch.api.default_device(True) if args.cuda else
              "this CPU (echo_torch.host_cpu, the workspace run's op times)")
    lines.insert(0, f"{where}; extra compute priced on {priced}")
    print("\n" + "\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


@dataclasses.dataclass
class Row:
    model: str
    label: str
    result: harness.StepResult
    report: object  # echo_torch.report, or None
    eager: harness.StepResult
    plain: Optional[harness.StepResult] = None  # the timing reference


def table(rows, runs):
    head = ("| model | run | measured peak | predicted | vs eager | extra compute "
            "| chunks | loss diff | max grad diff |")
    if runs:
        head += " step time | measured extra | vs eager's time |"
    lines = ["", head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        rep, result, eager = r.report, r.result, r.eager
        predicted = f"{rep.planned_peak_bytes / MIB:.1f} MiB ({100 * (result.peak_bytes / rep.planned_peak_bytes - 1):+.2f}%)" \
            if rep else "-"
        chunks = ", ".join(f"{c.chunks} x {c.chunk_rows} rows" for c in rep.chunked_regions) \
            if rep and rep.chunked_regions else "-"
        extra = f"{100 * rep.predicted_extra_compute_ratio:.2f}%" if rep else "-"
        line = (f"| {r.model} | {r.label} | {result.peak_bytes / MIB:.1f} MiB | {predicted} | "
                f"{eager.peak_bytes / result.peak_bytes:.2f}x | {extra} | {chunks} | "
                f"{abs(result.loss.item() - eager.loss.item()):.2e} | "
                f"{harness.max_grad_diff(result, eager):.2e} |")
        if runs:
            measured = f"{100 * (result.seconds / r.plain.seconds - 1):+.1f}%" \
                if r.plain else "-"
            line += (f" {1e3 * result.seconds:.1f} ms | {measured} | "
                     f"{result.seconds / eager.seconds:.2f}x |")
        lines.append(line)
    return lines


if __name__ == "__main__":
    main()
