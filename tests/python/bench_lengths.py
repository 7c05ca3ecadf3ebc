#!/usr/bin/env python3
"""A plain training loop over changing sequence lengths, eager against
echo_torch.optimize (issue 46): a GPT-2 (256 wide, 4 layers, vocabulary
8192), batch 4, cycling through six lengths, plain SGD steps. Prints the
total time of each run (capture and planning included), the time of the
last cycle (every length seen), each length's first step, and the largest
relative difference between the two runs' losses.

  build/venv/bin/python tests/python/bench_lengths.py [--steps 24]

Starts build/bin/echod (or $ECHO_ECHOD) on a free port, with an empty plan
cache (a temporary directory).
"""
import argparse
import tempfile
import time

import torch
import transformers

import servers
import echo_torch

LENGTHS = [64, 96, 128, 160, 192, 256]


def model_and_batches(steps, batch):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=256, n_layer=4, n_head=4,
                                     vocab_size=8192, n_positions=256,
                                     resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    batches = []
    for step in range(steps):
        length = LENGTHS[step % len(LENGTHS)]
        ids = torch.randint(0, 8192, (batch, length))
        batches.append(ids)
    return model, batches


def run(model, step_fn, batches):
    """Per-step seconds and losses."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    seconds, losses = [], []
    for ids in batches:
        start = time.perf_counter()
        loss = step_fn(ids)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
    return seconds, losses


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(2)
    with servers.Echod() as echod, tempfile.TemporaryDirectory() as cache:
        eager_model, batches = model_and_batches(args.steps, args.batch)
        echo_model, _ = model_and_batches(args.steps, args.batch)
        wrapped = echo_torch.optimize(echo_model, server=echod.address,
                                      plan_cache=echo_torch.PlanCache(cache))
        # Interleaved by runs, eager first.
        eager_s, eager_l = run(eager_model,
                               lambda ids: eager_model(ids, labels=ids).loss, batches)
        echo_s, echo_l = run(echo_model,
                             lambda ids: wrapped(ids, labels=ids).loss, batches)
        n = len(LENGTHS)
        print(f"{args.steps} steps over lengths {LENGTHS}, batch {args.batch}")
        print(f"total: eager {sum(eager_s):.2f} s, Echo {sum(echo_s):.2f} s "
              f"({sum(echo_s) / sum(eager_s):.2f}x)")
        print(f"last cycle: eager {sum(eager_s[-n:]):.2f} s, Echo "
              f"{sum(echo_s[-n:]):.2f} s ({sum(echo_s[-n:]) / sum(eager_s[-n:]):.2f}x)")
        print("first step per length (s): " + ", ".join(
            f"{LENGTHS[i]}: {echo_s[i]:.2f} vs {eager_s[i]:.2f}" for i in range(n)))
        print("max loss difference: %.2e" % max(
            abs(a - b) / abs(a) for a, b in zip(eager_l, echo_l)))


if __name__ == "__main__":
    main()
