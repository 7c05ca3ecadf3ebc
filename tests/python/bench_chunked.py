#!/usr/bin/env python3
"""Chunked loss at the suite's paper sizes (issue 20's bar), measured on the
CPU: per model, eager's step, Echo AUTO within --ratio (default 5%) extra
compute on h100-80gb with recompute only (chunking="off") and with chunked
loss regions (chunking="auto"). Per row: the measured step peak (the CPU
allocator's peak plus the tensors that exist before the step, as
harness.run_step measures it), echod's predicted peak, the reduction against
eager's measured peak, the plan's extra compute, the chunks, and the largest
loss and gradient differences from eager.

  build/venv/bin/python tests/python/bench_chunked.py [--models gpt transformer nmt]

Starts build/bin/echod (or $ECHO_ECHOD) on a free port. Prints one markdown
table.
"""
import argparse
import time

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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    with servers.Echod() as echod:
        for name in args.models:
            torch.manual_seed(0)
            model = models.build_paper(name)
            inputs = models.example_inputs(model)
            started = time.perf_counter()
            eager = harness.eager(model, inputs)
            rows.append((name, "eager", eager, None, eager))
            for chunking in ("off", "auto"):
                wrapped = echo_torch.optimize(
                    model, server=echod.address, max_overhead_ratio=args.ratio,
                    chunking=chunking, plan_cache=False, on_error="raise")
                result = harness.run_step(model, wrapped, inputs)
                rows.append((name, f"Echo AUTO {100 * args.ratio:g}%, chunking {chunking}",
                             result, echo_torch.report(wrapped), eager))
            print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    print("\n| model | run | measured peak | predicted | vs eager | extra compute "
          "| chunks | loss diff | max grad diff |\n|---|---|---|---|---|---|---|---|---|")
    for name, label, result, rep, eager in rows:
        predicted = f"{rep.planned_peak_bytes / MIB:.1f} MiB ({100 * (result.peak_bytes / rep.planned_peak_bytes - 1):+.2f}%)" \
            if rep else "-"
        chunks = ", ".join(f"{r.chunks} x {r.chunk_rows} rows" for r in rep.chunked_regions) \
            if rep and rep.chunked_regions else "-"
        extra = f"{100 * rep.predicted_overhead_ratio:.2f}%" if rep else "-"
        print(f"| {name} | {label} | {result.peak_bytes / MIB:.1f} MiB | {predicted} | "
              f"{eager.peak_bytes / result.peak_bytes:.2f}x | {extra} | {chunks} | "
              f"{abs(result.loss.item() - eager.loss.item()):.2e} | "
              f"{harness.max_grad_diff(result, eager):.2e} |")


if __name__ == "__main__":
    main()
