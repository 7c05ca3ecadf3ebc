#!/usr/bin/env python3
"""The time the hook adds before the first training step, by stage, on the
paper-scale NMT (or a suite model), beside torch's own compile of the same
model (torch.compile with the aot_eager backend: Dynamo + AOTAutograd, no
code generation), and the same with a warm plan cache (a second process).

  build/venv/bin/python tests/python/bench_first_step.py [--model nmt-paper]

Starts build/bin/echod (or $ECHO_ECHOD) on a free port. Prints one line per
measurement.
"""
import argparse
import tempfile
import time

import torch

import models
import servers
import echo_torch


def build(name):
    if name == "nmt-paper":
        torch.manual_seed(0)
        model = models.NMT(models.NMT_PAPER)
    else:
        model = models.build(name)
    return model, models.example_inputs(model)


def first_step(model, inputs, wrapped):
    """Seconds of one training step (forward and backward)."""
    start = time.perf_counter()
    wrapped(*inputs).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="nmt-paper")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, inputs = build(args.model)

    eager = first_step(model, inputs, model)
    print(f"eager step: {eager:.1f} s", flush=True)
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    torch_first = first_step(model, inputs, compiled)
    torch_second = first_step(model, inputs, compiled)
    print(f"torch.compile(aot_eager): first step {torch_first:.1f} s, second "
          f"{torch_second:.1f} s: compile ~{torch_first - torch_second:.1f} s", flush=True)
    torch._dynamo.reset()

    with servers.Echod() as echod, tempfile.TemporaryDirectory() as cache_dir:
        for run in ("cold plan cache", "warm plan cache"):
            wrapped = echo_torch.optimize(model, server=echod.address, max_overhead_ratio=0.05,
                                          plan_cache=echo_torch.PlanCache(cache_dir),
                                          on_error="raise")
            total = first_step(model, inputs, wrapped)
            second = first_step(model, inputs, wrapped)
            rep = echo_torch.report(wrapped)
            stages = ", ".join(f"{k} {v:.1f} s" for k, v in rep.seconds.items())
            print(f"echo_torch ({run}): first step {total:.1f} s, second {second:.1f} s: "
                  f"added ~{total - second:.1f} s ({stages}; capture is the rest)",
                  flush=True)


if __name__ == "__main__":
    main()
