#!/usr/bin/env python3
"""Per model of the suite (CI sizes, see models.py): the bytes saved for the
backward and the peak of one training step, measured on CPU (see
tests/python/measure.py), for eager PyTorch, functorch's min-cut partition,
and echo_torch with echod's ECHO and AUTO plans; and the extra compute of
each. Prints a markdown table.

  build/venv/bin/python tests/python/bench_models.py \
      [--server HOST:PORT] [--models nmt gpt ...] [--runs N]

Without --server it starts build/bin/echod (or $ECHO_ECHOD) on a free port.

Extra compute: "predicted" is echod's recompute_overhead_ratio (its cost
model, fed with the CPU op times echo_torch measured at capture); "measured"
is the fastest of --runs steps relative to the plain AOTAutograd partition
(same executor, no recomputation) on this machine's CPU: noisy at these sizes
on a shared 2-core machine.
"""
import argparse
import sys
import time

import grpc
import torch

import harness
import models
import servers
from echo_torch import report

MIB = 1 << 20


def _row(model, method, result, plain, eager, predicted_peak="", recomputes="",
         predicted_overhead=""):
    row = (f"| {model} | {method} | {result.saved_bytes / MIB:.2f} | "
           f"{result.peak_bytes / MIB:.2f} | {predicted_peak} | "
           f"{eager.peak_bytes / result.peak_bytes:.2f}x | {recomputes} | "
           f"{predicted_overhead} |")
    if plain.seconds:
        row += f" {100 * (result.seconds / plain.seconds - 1):+.1f}% |"
    return row


def bench_model(name, address, client, runs):
    model = models.build(name)
    inputs = models.example_inputs(model)
    kw = {"timing_runs": runs}
    eager = harness.eager(model, inputs, **kw)
    plain = harness.aot_plain(model, inputs, **kw)
    estimate = harness.estimate(client, plain.wrapped.converted.graph)
    ops = len(plain.wrapped.converted.graph.ops)
    rows = [_row(name, f"eager ({ops} ops)", eager, plain, eager),
            _row(name, "AOT plain", plain, plain, eager,
                 f"{estimate.peak_bytes / MIB:.2f}", "0", "0")]
    try:
        peer = harness.mincut(model, inputs, **kw)
        rows.append(_row(name, "min-cut", peer, plain, eager))
    except RuntimeError as error:  # networkx missing
        rows.append(f"| {name} | min-cut | n/a: {error} | | | | | |")
    for policy in ("ECHO", "AUTO"):
        try:
            result = harness.echo(model, inputs, address, policy, **kw)
        except grpc.RpcError as error:
            rows.append(f"| {name} | {policy} | n/a: {error.code().name} | | | | | |")
            continue
        rep = report(result.wrapped)
        rows.append(_row(name, policy, result, plain, eager,
                         f"{rep.planned_peak_bytes / MIB:.2f}", str(rep.recompute_executions),
                         f"{100 * rep.predicted_extra_compute_ratio:.2f}%"))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="a running echod (default: start one)")
    parser.add_argument("--models", nargs="*", default=list(models.MODEL_NAMES))
    parser.add_argument("--runs", type=int, default=0,
                        help="timed steps per method (0: no timing column)")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)

    with servers.planner_client(args.server) as client:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
              f"{time.strftime('%Y-%m-%d')}\n")
        header = ("| model | method | saved MiB | peak MiB (measured) | peak MiB (predicted) | "
                  "eager peak / peak | recomputations | extra compute (predicted) |")
        if args.runs:
            header += " step time vs plain (measured) |"
        print(header)
        print("|---" * header.count(" | ") + "|---|")
        for name in args.models:
            for row in bench_model(name, client.address, client, args.runs):
                print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
