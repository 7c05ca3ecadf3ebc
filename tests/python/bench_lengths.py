#!/usr/bin/env python3
"""A plain training loop over changing sequence lengths, eager against
echo_torch.optimize (issue 46): a GPT-2 (256 wide, 4 layers, vocabulary
8192; or --model gpt2-124m, llama), batch 4, cycling through six lengths
(or --lengths longtail: padded batches of log-normal lengths), plain SGD
steps. Prints the total time of each run (capture and planning included),
the time of the last cycle (every length seen; longtail: the last quarter),
the first steps, the largest
relative difference between the two runs' losses, and per length the
planned peak against eager's peak as planned (echod's baseline).

  build/venv/bin/python tests/python/bench_lengths.py [--steps 24]
      [--dynamic-shapes auto|true|false|all|none] [--compile]
      [--model gpt2|gpt2-124m|llama] [--lengths cycle|longtail]

--dynamic-shapes all runs the three policies one after the other (eager
again before each), none runs none of them; --compile adds plain torch.compile(dynamic=True) (the
inductor compiler) as a reference.

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
MAX_LENGTH = 256


def _model(name):
    if name == "gpt2-124m":  # GPT-2 small as released (vocabulary 50257)
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_positions=MAX_LENGTH, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    if name == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=8192, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=MAX_LENGTH))
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_embd=256, n_layer=4, n_head=4, vocab_size=8192, n_positions=MAX_LENGTH,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def lengths_of(kind, steps):
    """cycle: the six LENGTHS in turn. longtail: a batch padded to its
    longest of 4 sequences whose lengths are log-normal (median 48 tokens,
    a tail to MAX_LENGTH), as instruction-tuning sets are: most steps get a
    length not seen before."""
    if kind == "cycle":
        return [LENGTHS[step % len(LENGTHS)] for step in range(steps)]
    generator = torch.Generator().manual_seed(0)
    draws = torch.exp(torch.randn(steps, 4, generator=generator) * 0.8 + 3.9)
    return [int(min(MAX_LENGTH, max(8, row.max().item()))) for row in draws]


def model_and_batches(steps, batch, name="gpt2", kind="cycle"):
    torch.manual_seed(0)
    model = _model(name)
    vocab = model.config.vocab_size
    return model, [torch.randint(0, vocab, (batch, n)) for n in lengths_of(kind, steps)]


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


def compare(name, eager_s, eager_l, other_s, other_l, n):
    print(f"{name}: total {sum(other_s):.2f} s against eager's {sum(eager_s):.2f} s "
          f"({sum(other_s) / sum(eager_s):.2f}x); last cycle {sum(other_s[-n:]):.2f} s "
          f"against {sum(eager_s[-n:]):.2f} s ({sum(other_s[-n:]) / sum(eager_s[-n:]):.2f}x)")
    print("  first %d steps (s): " % n + ", ".join(
        f"{other_s[i]:.2f} vs {eager_s[i]:.2f}" for i in range(n)))
    print("  max relative loss difference: %.2e" % max(
        abs(a - b) / abs(a) for a, b in zip(eager_l, other_l)))


POLICIES = {"auto": "auto", "true": True, "false": False}


def run_echo(policy, args, echod, batches):
    with tempfile.TemporaryDirectory() as cache:
        model, _ = model_and_batches(args.steps, args.batch, args.model, args.lengths)
        wrapped = echo_torch.optimize(model, server=echod.address,
                                      plan_cache=echo_torch.PlanCache(cache),
                                      dynamic_shapes=POLICIES[policy])
        seconds, losses = run(model, lambda ids: wrapped(ids, labels=ids).loss, batches)
        plans = {r.shapes: r for r in wrapped.reports()}
    return seconds, losses, plans


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--dynamic-shapes", default="auto",
                        choices=sorted(POLICIES) + ["all", "none"])
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--model", default="gpt2", choices=["gpt2", "gpt2-124m", "llama"])
    parser.add_argument("--lengths", default="cycle", choices=["cycle", "longtail"])
    args = parser.parse_args()
    torch.set_num_threads(2)
    policies = {"all": sorted(POLICIES), "none": []}.get(args.dynamic_shapes,
                                                          [args.dynamic_shapes])
    lengths = lengths_of(args.lengths, args.steps)
    # The last cycle: every length seen before (cycle), or the last quarter.
    n = len(LENGTHS) if args.lengths == "cycle" else max(1, args.steps // 4)
    print(f"{args.model}, {args.steps} steps, batch {args.batch}, lengths {lengths} "
          f"({len(set(lengths))} distinct)")
    with servers.Echod() as echod:
        for policy in policies:
            # Eager right before each run: the machine's speed drifts.
            eager_model, batches = model_and_batches(args.steps, args.batch, args.model,
                                                     args.lengths)
            eager_s, eager_l = run(eager_model,
                                   lambda ids: eager_model(ids, labels=ids).loss, batches)
            echo_s, echo_l, plans = run_echo(policy, args, echod, batches)
            compare(f"Echo, dynamic_shapes={POLICIES[policy]}", eager_s, eager_l, echo_s,
                    echo_l, n)
            mib = 1 << 20
            print("  planned peak per length (MiB, eager's as planned): " + ", ".join(
                f"{shapes.split(',')[1].strip(' )')}: {r.planned_peak_bytes / mib:.1f} "
                f"({r.baseline_peak_bytes / mib:.1f})" for shapes, r in plans.items()))
        if args.compile:
            eager_model, batches = model_and_batches(args.steps, args.batch, args.model,
                                                     args.lengths)
            eager_s, eager_l = run(eager_model,
                                   lambda ids: eager_model(ids, labels=ids).loss, batches)
            model, _ = model_and_batches(args.steps, args.batch, args.model, args.lengths)
            compiled = torch.compile(model, dynamic=True)
            seconds, losses = run(model, lambda ids: compiled(ids, labels=ids).loss, batches)
            compare("torch.compile(dynamic=True)", eager_s, eager_l, seconds, losses, n)


if __name__ == "__main__":
    main()
