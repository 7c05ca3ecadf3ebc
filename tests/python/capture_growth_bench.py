#!/usr/bin/env python3
"""How the hook's capture time grows with a model's depth: issue 24 asks
that a deep model's capture not grow faster than its op count.

  build/venv/bin/python tests/python/capture_growth_bench.py \
      [--model transformer|resnet] [--depths 8,16,32,64,128] [--batch 2]

Per depth, the two halves of what capture_graph runs (as
layer_depth_bench.py captures: the step itself is not run):
  trace    capture_module until the partitioner is called: Dynamo and
           AOTAutograd tracing the joint forward/backward with fake tensors;
  convert  echo_torch.convert on the joint graph (the echo.v1.Graph).
Each is printed in microseconds per op of the converted graph, beside the
smallest depth's rate measured in the same run, and the least-squares
growth exponent of seconds over ops (1.0: linear) closes the table.
"""
import argparse
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import layer_depth_bench as ldb  # noqa: E402
from echo_torch import capture as capture_lib  # noqa: E402
from echo_torch.convert import convert  # noqa: E402


def timed_capture(model, depth, batch):
    """(ops, trace seconds, convert seconds) of one capture."""
    module, inputs = ldb.build(model, depth, batch)
    out = {}
    start = time.perf_counter()

    def partitioner(joint):
        out["trace"] = time.perf_counter() - start
        begin = time.perf_counter()
        out["ops"] = len(convert(joint).graph.ops)
        out["convert"] = time.perf_counter() - begin
        raise ldb._Converted()

    fn = capture_lib.capture_module(module, partitioner, inputs, {}, "eager")
    try:
        with torch.enable_grad():
            fn(*inputs)
    except ldb._Converted:
        pass
    if "ops" not in out:
        raise RuntimeError(f"{model} depth {depth}: the capture did not reach the converter")
    return out["ops"], out["trace"], out["convert"]


def exponent(points):
    """Least-squares slope of log(seconds) over log(ops)."""
    xs = [math.log(ops) for ops, _ in points]
    ys = [math.log(seconds) for _, seconds in points]
    n = len(points)
    sx, sy = sum(xs), sum(ys)
    sxx = sum(x * x for x in xs)
    sxy = sum(x * y for x, y in zip(xs, ys))
    return (n * sxy - sx * sy) / (n * sxx - sx * sx)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="transformer", choices=["transformer", "resnet"])
    parser.add_argument("--depths", default="8,16,32,64,128")
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args()
    ldb.raise_stack_limit()
    depths = [int(d) for d in args.depths.split(",")]
    # A first small capture warms Dynamo and the converter's imports, so that
    # the smallest depth's rate is not a cold start's.
    timed_capture(args.model, depths[0], args.batch)
    print(f"| {args.model} depth | ops | trace s | trace us/op (first) | convert s "
          "| convert us/op (first) |")
    print("|---|---|---|---|---|---|")
    rows = []
    for depth in depths:
        ops, trace, conv = timed_capture(args.model, depth, args.batch)
        rows.append((ops, trace, conv))
        first = rows[0]
        print(f"| {depth} | {ops} | {trace:.2f} | {1e6 * trace / ops:.0f} "
              f"({1e6 * first[1] / first[0]:.0f}) | {conv:.2f} | "
              f"{1e6 * conv / ops:.0f} ({1e6 * first[2] / first[0]:.0f}) |", flush=True)
    if len(rows) >= 2:
        print(f"| growth exponent | | {exponent([(o, t) for o, t, _ in rows]):.2f} | | "
              f"{exponent([(o, c) for o, _, c in rows]):.2f} | |")


if __name__ == "__main__":
    main()
