#!/usr/bin/env python3
"""Time that holds on this machine's CPU (issue 48's bar): a GPT-2 (256
wide, 4 layers, vocabulary 8192), batch 8 x 256, optimize() at the
defaults the hook picks for a CPU model, at max_overhead_ratio 0.05 and
0.20. Per budget: the plan's predicted_overhead_ratio beside the measured
step-time overhead against eager (medians of --steps forward+backward steps,
eager and the planned models interleaved step by step), the planned peak and
what the plan recomputes.

  build/venv/bin/python tests/python/bench_time_truth.py [--steps 15]
      [--budgets 0.05 0.20] [--device NAME]

Starts build/bin/echod (or $ECHO_ECHOD) on a free port with an empty plan
cache. Prints one line per budget and, with --json FILE, writes them.
"""
import argparse
import json
import statistics
import tempfile
import time

import torch
import transformers

import servers
import echo_torch


def gpt2(width=256, layers=4, vocab=8192, positions=256):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=width, n_layer=layers, n_head=4,
                                     vocab_size=vocab, n_positions=positions,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config)


def step_seconds(call, ids):
    start = time.perf_counter()
    loss = call(ids)
    loss.backward()
    return time.perf_counter() - start


def measure(budgets, steps, batch, length, device=None, warmup=2, **options):
    """Rows of (budget, predicted, measured, peak, recomputed ops)."""
    torch.set_num_threads(2)
    eager = gpt2()
    ids = torch.randint(0, eager.config.vocab_size, (batch, length),
                        generator=torch.Generator().manual_seed(1))
    rows = []
    with servers.Echod() as echod, tempfile.TemporaryDirectory() as cache:
        planned = []
        for budget in budgets:
            model = gpt2()
            wrapped = echo_torch.optimize(model, server=echod.address,
                                          max_overhead_ratio=budget, device=device,
                                          plan_cache=echo_torch.PlanCache(cache),
                                          on_error="raise", **options)
            planned.append((model, wrapped))
        calls = [lambda x: eager(x, labels=x).loss]
        calls += [lambda x, w=w: w(x, labels=x).loss for _, w in planned]
        models = [eager] + [m for m, _ in planned]
        times = [[] for _ in calls]
        for step in range(warmup + steps):
            for i, call in enumerate(calls):
                seconds = step_seconds(call, ids)
                models[i].zero_grad(set_to_none=True)
                if step >= warmup:
                    times[i].append(seconds)
        eager_s = statistics.median(times[0])
        for budget, (model, wrapped), t in zip(budgets, planned, times[1:]):
            rep = echo_torch.report(wrapped)
            measured = statistics.median(t) / eager_s - 1.0
            rows.append(dict(budget=budget, predicted=rep.predicted_overhead_ratio,
                             measured=measured, eager_step_s=eager_s,
                             planned_step_s=statistics.median(t),
                             planned_peak_bytes=rep.planned_peak_bytes,
                             recomputed_ops=sum(rep.recomputed_op_types.values()),
                             measured_ops=rep.measured_ops,
                             chunks=[c.chunks for c in rep.chunked_regions]))
    return rows


def describe(r) -> str:
    """One row as a line."""
    return (f"budget {r['budget']:.2f}: predicted {100 * r['predicted']:+.1f}%, measured "
            f"{100 * r['measured']:+.1f}% (eager {1e3 * r['eager_step_s']:.0f} ms, planned "
            f"{1e3 * r['planned_step_s']:.0f} ms), peak {r['planned_peak_bytes'] / 2**20:.1f} "
            f"MiB, {r['recomputed_ops']} ops recomputed, chunks {r['chunks']}, priced by "
            f"{r['measured_ops']} measured ops")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.05, 0.20])
    parser.add_argument("--device", default=None)
    parser.add_argument("--client_timing", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = measure(args.budgets, args.steps, args.batch, args.length, device=args.device,
                   **({"client_timing": True} if args.client_timing else {}))
    for r in rows:
        print(describe(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
