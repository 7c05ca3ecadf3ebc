#!/usr/bin/env python3
"""The paper's NMT at the paper's scale (models.NMT_PAPER: batch 80, length
50, embedding 500, hidden 1000, attention 512, vocabulary 30000), measured:
bytes the forward leaves for the backward and the step peak, for eager,
AOTAutograd's plain partition and Echo AUTO at <= 5% extra compute on
h100-80gb with each objective (peak_bytes, stash_bytes).

  build/venv/bin/python tests/python/bench_paper_nmt.py [--ratio 0.05] [--cuda]

Starts build/bin/echod (or $ECHO_ECHOD) on a free port. Measurement as in
harness.run_step (saved_tensors_hooks; the CPU allocator's peak plus the
tensors that exist before the step, or torch.cuda.max_memory_allocated with
--cuda). Extra compute: the plan's recompute_overhead_ratio under echod's
h100-80gb roofline. Prints one markdown table.
"""
import argparse
import time

import torch

import harness
import models
import servers
import echo_torch

MIB = 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratio", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cuda", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = "cuda" if args.cuda else "cpu"
    torch.manual_seed(0)
    model = models.NMT(models.NMT_PAPER).to(device)
    inputs = tuple(x.to(device) for x in models.example_inputs(model))
    rows = []

    def row(label, result, rep=None):
        rows.append((label, result, rep))
        print(f"{label}: saved {result.saved_bytes / MIB:.1f} MiB, peak "
              f"{result.peak_bytes / MIB:.1f} MiB", flush=True)

    started = time.perf_counter()
    eager = harness.eager(model, inputs)
    row("eager", eager)
    row("AOT plain (torch's default partition skipped: same graph, no recomputation)",
        harness.aot_plain(model, inputs))
    with servers.Echod() as echod:
        for objective in ("peak_bytes", "stash_bytes"):
            wrapped = echo_torch.optimize(model, server=echod.address,
                                          max_overhead_ratio=args.ratio, objective=objective,
                                          plan_cache=False, on_error="raise")
            result = harness.run_step(model, wrapped, inputs)
            if harness.max_grad_diff(result, eager) > 1e-4:
                print(f"WARNING: {objective}: gradients differ from eager's", flush=True)
            row(f"Echo AUTO {100 * args.ratio:g}%, objective {objective}", result,
                echo_torch.report(wrapped))
    print(f"\n({time.perf_counter() - started:.0f} s, torch {torch.__version__}, {device})\n")
    print("| point | held for backward MiB | vs eager | step peak MiB | vs eager | "
          "predicted step peak MiB | extra compute (h100-80gb roofline) |")
    print("|---|---|---|---|---|---|---|")
    for label, result, rep in rows:
        predicted = f"{rep.planned_peak_bytes / MIB:.1f}" if rep else ""
        overhead = f"{100 * rep.predicted_extra_compute_ratio:.2f}%" if rep else "0"
        print(f"| {label} | {result.saved_bytes / MIB:.1f} | "
              f"{eager.saved_bytes / result.saved_bytes:.2f}x | {result.peak_bytes / MIB:.1f} | "
              f"{eager.peak_bytes / result.peak_bytes:.2f}x | {predicted} | {overhead} |")


if __name__ == "__main__":
    main()
