#!/usr/bin/env python3
"""The whole iteration (issue 45): predicted against measured peaks of the
training loops people run, and the largest batch with the optimizer counted.

  build/venv/bin/python tests/python/bench_iteration.py
      [--part loops|max_batch|real|in_backward|all]
      [--server HOST:PORT] [--max_batch_models gpt2-124m,bert-base,llama-1b,vit-base]

loops: a GPT-2 (256 wide, 4 layers, 4 heads, vocabulary 8192, batch 8 x 256,
dropout off) through each loop of test_iteration.LOOPS (AdamW for-loop and
foreach, SGD with momentum, AdamW under bf16 autocast, two accumulated
micro-batches, zero_grad(set_to_none=False)): three iterations, the third
measured by the profiler's allocation events on top of the parameters,
optimizer state and held gradients (test_iteration._iterate), eager and
`optimize(model, optimizer=opt)` side by side in the same run. Printed:
each peak beside the report's prediction, the planned peak's breakdown,
and how far the parameters after three iterations are from eager's (under
bf16 autocast beside eager's own distance from eager run as two
accumulated halves of the batch: the same sums in another order).

max_batch: `echo_torch.max_batch_size` on h100-80gb (AUTO within 5% extra
compute, chunking auto) at the sizes people train, captured on this CPU at
batch 2 from random weights: forward+backward only, then with AdamW
(foreach, as on a GPU) counted, then with two accumulated micro-batches.
Llama-1B (Llama 3.2 1B's shape) has bf16 weights and fp32 AdamW moments
(OptimizerSpec.state_dtype), and is captured on the meta device.

real: the loops' measurement (AdamW foreach, three iterations, the third
measured) at the real sizes of max_batch on this CPU, at --real_batch
(default 2; Llama-1B is left out by default: bf16 matmuls on this CPU take
minutes per iteration).

in_backward: `optimize(..., update_in_backward=True)` against the step at
the end and eager (AdamW foreach), at the loops' size and on GPT-2 124M and
a 4-layer Llama of Llama 3.2 1B's width at batch 1 x --in_backward_sequence
(default 128): peaks measured and
predicted, the parameters' distance from Echo's with the step at the end,
and the median of three steady steps' seconds.

Without --server it starts build/bin/echod (or $ECHO_ECHOD) on a free port.
"""
import argparse
import copy
import os
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402
from test_iteration import LOOPS, _iterate, gpt2_config  # noqa: E402

import echo_torch  # noqa: E402
from echo_torch import optimize, report  # noqa: E402
from echo_torch.proto import graph_pb2  # noqa: E402

MIB = 1 << 20
# The issue's GPT-2: 256 wide, 4 layers, vocabulary 8192 (batch 8 x 256).
_ISSUE_SIZE = gpt2_config(vocab_size=8192, n_layer=4, n_embd=256, n_head=4, n_positions=256)


def loops(server):
    torch.manual_seed(0)
    base = transformers.GPT2LMHeadModel(_ISSUE_SIZE).train()
    ids = torch.randint(0, 8192, (8, 256))
    print("| loop | eager peak | baseline predicted | Echo peak | Echo predicted | "
          "at the planned peak | max abs Δ parameters vs eager | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for name, loop in LOOPS.items():
        start = time.perf_counter()
        eager_model = copy.deepcopy(base)
        eager = _iterate(eager_model, eager_model, loop.optimizer(eager_model.parameters()),
                         ids, loop)
        model = copy.deepcopy(base)
        opt = loop.optimizer(model.parameters())
        wrapped = optimize(model, server=server, plan_cache=False, on_error="raise",
                           optimizer=opt)
        measured = _iterate(model, wrapped, opt, ids, loop)
        rep = report(wrapped)
        delta = _max_delta(model, eager_model)
        breakdown = _breakdown(rep, 1)
        print(f"| {name} | {eager / MIB:.2f} MiB | {rep.baseline_peak_bytes / MIB:.2f} MiB "
              f"({100 * (rep.baseline_peak_bytes / eager - 1):+.2f}%) | {measured / MIB:.2f} MiB "
              f"({measured / eager:.2f}x eager) | {rep.planned_peak_bytes / MIB:.2f} MiB "
              f"({100 * (rep.planned_peak_bytes / measured - 1):+.3f}%) | {rep.peak_op}: "
              f"{breakdown} MiB | {delta:.2e} | {time.perf_counter() - start:.0f} |", flush=True)
        if loop.autocast:
            # bf16's own noise, for scale: eager again on the same batch as
            # two accumulated halves (the same sums in another order).
            halves = copy.deepcopy(base)
            _iterate(halves, _Halves(halves), loop.optimizer(halves.parameters()), ids, loop)
            print(f"| {name}: eager as 2 accumulated halves (reference) | | | | | | "
                  f"{_max_delta(halves, eager_model):.2e} | |", flush=True)


class _Halves:
    """Calls the model on each half of the batch and returns the mean loss
    (the gradient is the whole batch's; the sums run in another order)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, input_ids, labels):
        half = input_ids.shape[0] // 2
        loss = sum(self.model(input_ids=input_ids[i:i + half], labels=labels[i:i + half]).loss
                   for i in (0, half)) / 2
        return transformers.modeling_outputs.CausalLMOutput(loss=loss)


def _max_delta(model, reference) -> float:
    return max((a - b).abs().max().item()
               for a, b in zip(model.parameters(), reference.parameters()))


def _models():
    """name -> (model factory, inputs at batch 2, optimizer state dtype)."""
    def gpt2():
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config())
        ids = torch.randint(0, 50257, (2, 1024))
        return model, dict(input_ids=ids, labels=ids)

    def bert():
        model = transformers.BertForMaskedLM(transformers.BertConfig())
        ids = torch.randint(0, 30522, (2, 512))
        return model, dict(input_ids=ids, labels=ids)

    def llama():
        config = transformers.LlamaConfig(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192,
            num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
            max_position_embeddings=2048, tie_word_embeddings=True, torch_dtype=torch.bfloat16)
        # On the meta device: planned from shapes alone, without 2.5 GB of
        # weights or their bf16 matmuls on this CPU (minutes per step).
        with torch.device("meta"):
            model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
        ids = torch.randint(0, 128256, (2, 512)).to("meta")
        return model, dict(input_ids=ids, labels=ids)

    def vit():
        model = transformers.ViTForImageClassification(transformers.ViTConfig())
        return model, dict(pixel_values=torch.randn(2, 3, 224, 224),
                           labels=torch.randint(0, 2, (2,)))

    return {"gpt2-124m": (gpt2, graph_pb2.DTYPE_UNSPECIFIED),
            "bert-base": (bert, graph_pb2.DTYPE_UNSPECIFIED),
            "llama-1b": (llama, graph_pb2.DTYPE_FLOAT32),
            "vit-base": (vit, graph_pb2.DTYPE_UNSPECIFIED)}


def _build(name):
    """(model in train mode, its inputs at batch 2, optimizer state dtype)."""
    make, state_dtype = _models()[name]
    torch.manual_seed(0)
    model, inputs = make()
    return model.train(), inputs, state_dtype


def _breakdown(rep, digits: int) -> str:
    """report(model).peak_breakdown in MiB, the roles that hold bytes."""
    return ", ".join(f"{key.replace('_bytes', '').replace('_', ' ')} {value / MIB:.{digits}f}"
                     for key, value in rep.peak_breakdown.items() if value)


def _words(iteration: str) -> str:
    """The iteration's words, to 90 characters, or what it says of updates
    in the backward."""
    found = iteration.find(", updates in the backward")
    if found < 0:
        found = iteration.find(", no update in the backward")
    return iteration[found + 2:] if found >= 0 else iteration[:90]


def max_batch(server, names):
    from echo_torch.hook_common import default_device
    from echo_torch.proto import device_pb2, planner_pb2
    client = echo_torch.client.connect(server)
    print("| model | parameters | optimizer | largest batch, plain | with Echo | "
          "peak at Echo's batch | echod's words |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        model, inputs, state_dtype = _build(name)
        params = sum(p.numel() for p in model.parameters())
        converted = echo_torch.capture_graph(model, **inputs)
        del model
        adamw = dict(kind=graph_pb2.OPTIMIZER_KIND_ADAMW, state_dtype=state_dtype,
                     implementation=graph_pb2.OPTIMIZER_IMPLEMENTATION_FOREACH)
        variants = (("none (forward+backward)", None),
                    ("AdamW", graph_pb2.OptimizerSpec(**adamw)),
                    ("AdamW, 2 micro-batches",
                     graph_pb2.OptimizerSpec(**adamw, holds_gradients=True)),
                    ("AdamW, updates in the backward",
                     graph_pb2.OptimizerSpec(**adamw, update_in_backward=True)))
        for label, spec in variants:
            graph = graph_pb2.Graph()
            graph.CopyFrom(converted.graph)
            if spec is not None:
                graph.optimizer.CopyFrom(spec)
            request = planner_pb2.FindMaxBatchSizeRequest(
                graph=graph, device=device_pb2.DeviceSpec(name=default_device(False)),
                max_overhead_ratio=0.05, chunking=planner_pb2.CHUNKING_MODE_AUTO)
            response = client.find_max_batch_size(request)
            plain, echo = response.without_recompute, response.with_recompute
            print(f"| {name} | {params / 1e6:.0f} M | {label}"
                  f"{' (fp32 state)' if spec is not None and state_dtype else ''} | "
                  f"{plain.batch_size if plain.found else 'none'} | "
                  f"{echo.batch_size if echo.found else 'none'} | "
                  f"{echo.peak_bytes / (1 << 30):.2f} GiB | {_words(response.iteration)} |",
                  flush=True)


def real(server, names, batch):
    """Predicted against measured iteration peak at the real sizes, AdamW
    (foreach), three iterations, on this CPU at `batch`."""
    loop = LOOPS["adamw (foreach)"]
    print("| model | batch | eager peak | baseline predicted | Echo peak | Echo predicted | "
          f"at the planned peak | max abs Δ parameters vs eager | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        base, inputs, _ = _build(name)
        inputs = {k: torch.cat([v] * max(1, batch // 2)) for k, v in inputs.items()}
        start = time.perf_counter()
        eager_model = copy.deepcopy(base)
        eager = _iterate(eager_model, _Call(eager_model, inputs),
                         loop.optimizer(eager_model.parameters()), inputs.values(), loop)
        model = copy.deepcopy(base)
        opt = loop.optimizer(model.parameters())
        wrapped = optimize(model, server=server, plan_cache=False, on_error="raise",
                           optimizer=opt)
        measured = _iterate(model, _Call(wrapped, inputs), opt, inputs.values(), loop)
        rep = report(wrapped)
        parts = _breakdown(rep, 0)
        print(f"| {name} | {batch} | {eager / MIB:.1f} MiB | {rep.baseline_peak_bytes / MIB:.1f} MiB "
              f"({100 * (rep.baseline_peak_bytes / eager - 1):+.2f}%) | {measured / MIB:.1f} MiB "
              f"({measured / eager:.2f}x eager) | {rep.planned_peak_bytes / MIB:.1f} MiB "
              f"({100 * (rep.planned_peak_bytes / measured - 1):+.3f}%) | {rep.peak_op}: {parts} "
              f"MiB | {_max_delta(model, eager_model):.2e} | "
              f"{time.perf_counter() - start:.0f} |", flush=True)


def in_backward(server, sequence: int):
    """The update in the backward against the step at the end: GPT-2 at the
    loops' size (activations make the peak), and GPT-2 124M and a Llama
    (Llama 3.2 1B's width and vocabulary, 4 layers, fp32; its nn.Linear
    gradients are views) at batch 1 x `sequence` (weights, gradients and
    AdamW's state make it), AdamW foreach; three iterations, the third measured, then the median of three
    more steps' seconds."""
    print("| model | loop | measured peak | predicted | at the planned peak | "
          "max abs Δ parameters vs Echo | step seconds (median of 3) |")
    print("|---|---|---|---|---|---|---|")
    llama = transformers.LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=4,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=2048,
        tie_word_embeddings=True)
    cases = [("GPT-2 256x4, 8 x 256", _ISSUE_SIZE, 8, 256),
             (f"GPT-2 124M, 1 x {sequence}", gpt2_config(), 1, sequence),
             (f"Llama 3.2 1B's width, 4 layers (fp32), 1 x {sequence}", llama, 1, sequence)]
    loop = LOOPS["adamw (foreach)"]
    for label, config, batch, length in cases:
        torch.manual_seed(0)
        base = transformers.AutoModelForCausalLM.from_config(config).train()
        ids = torch.randint(0, config.vocab_size, (batch, length))
        reference = None
        for name, moved in (("eager", None), ("Echo", False),
                            ("Echo, updates in the backward", True)):
            model = copy.deepcopy(base)
            opt = loop.optimizer(model.parameters())
            forward = model if moved is None else optimize(
                model, server=server, plan_cache=False, on_error="raise", optimizer=opt,
                update_in_backward=moved)
            measured = _iterate(model, forward, opt, ids, loop)
            seconds = []
            for _ in range(3):
                start = time.perf_counter()
                forward(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                opt.zero_grad()
                seconds.append(time.perf_counter() - start)
            if moved is None:
                print(f"| {label} | {name} | {measured / MIB:.1f} MiB | | | | "
                      f"{sorted(seconds)[1]:.3f} |", flush=True)
                continue
            rep = report(forward)
            delta = f"{_max_delta(model, reference):.1e}" if reference is not None else ""
            reference = reference or model
            print(f"| {label} | {name} | {measured / MIB:.1f} MiB | "
                  f"{rep.planned_peak_bytes / MIB:.1f} MiB "
                  f"({100 * (rep.planned_peak_bytes / measured - 1):+.3f}%) | {rep.peak_op}: "
                  f"{_breakdown(rep, 1)} MiB | {delta} | {sorted(seconds)[1]:.3f} |", flush=True)


class _Call:
    """forward(input_ids=..., labels=...) as _iterate calls it, with the
    model's own inputs (what _iterate passes is the list of them)."""

    def __init__(self, model, inputs):
        self.model, self.inputs = model, inputs

    def __call__(self, input_ids=None, labels=None):
        return self.model(**self.inputs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=["loops", "max_batch", "real", "in_backward", "all"],
                        default="all")
    parser.add_argument("--in_backward_sequence", type=int, default=128)
    parser.add_argument("--real_models", default="gpt2-124m,bert-base,vit-base")
    parser.add_argument("--real_batch", type=int, default=2)
    parser.add_argument("--server")
    parser.add_argument("--max_batch_models", default="gpt2-124m,bert-base,llama-1b,vit-base")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    with servers.Echod() if args.server is None else _Given(args.server) as echod:
        if args.part in ("loops", "all"):
            loops(echod.address)
        if args.part in ("max_batch", "all"):
            max_batch(echod.address, args.max_batch_models.split(","))
        if args.part in ("real", "all"):
            real(echod.address, args.real_models.split(","), args.real_batch)
        if args.part in ("in_backward", "all"):
            in_backward(echod.address, args.in_backward_sequence)


class _Given:
    def __init__(self, address):
        self.address = address

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
