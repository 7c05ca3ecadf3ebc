#!/usr/bin/env python3
"""Hugging Face and timm models at the sizes people train, captured by the
hook with fake tensors (the step is not run) and planned by echod on
h100-80gb: the plain peak, AUTO within --ratio (default 5%) recompute only,
and AUTO with chunked loss regions (issue 19's "In the benchmark: their real
sizes").

  build/venv/bin/python tests/python/bench_real_sizes.py [--models gpt2,llama,bert]
  build/venv-vision/bin/python tests/python/bench_real_sizes.py --models vit,convnext,resnet

Models (transformers, random weights from configs, train mode with the
libraries' default dropout, `model(input_ids=x, labels=x)`):
  gpt2   GPT2Config() (124M: 12 layers, 768 wide, vocabulary 50,257), fp32,
         batch 8 x 1024;
  llama  a Llama-3.2-1B-shaped LlamaConfig (16 layers, 2048 wide, 32 heads,
         8 key/value heads, FFN 8192, vocabulary 128,256), bf16 weights,
         batch 1 x 2048;
  bert   BertConfig() (BERT-base masked LM, 110M), fp32, batch 8 x 512;
timm (the vision venv, make python-vision-venv; random weights, 1,000
classes, train mode, `F.cross_entropy(model(x), y)`), fp32 at 224x224,
batch 64:
  vit       vit_base_patch16_224 (ViT-B/16, 86M);
  convnext  convnext_tiny (ConvNeXt-T, 29M);
  resnet    resnet50 (25.6M).
Capture: echo_torch's capture_module and converter, stopped after the
conversion (as layer_depth_bench.py captures). Starts build/bin/echod (or
$ECHO_ECHOD). Prints one markdown table.
"""
import argparse
import time

import torch

import models
import servers
from echo_torch import PlannerClient, capture as capture_lib, proto
from echo_torch.convert import convert

_pl = proto.planner_pb2
_dev = proto.device_pb2
GiB = 2**30


def gpt2():
    import transformers
    config = transformers.GPT2Config()
    return transformers.GPT2LMHeadModel(config), 8, 1024, torch.float32


def llama():
    import transformers
    config = transformers.LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=2048, tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(config), 1, 2048, torch.bfloat16


def bert():
    import transformers
    config = transformers.BertConfig()
    return transformers.BertForMaskedLM(config), 8, 512, torch.float32


def _timm(name):
    def make():
        import timm
        return models.ImageLoss(timm.create_model(name, pretrained=False)), 64, 224, torch.float32
    return make


MODELS = {"gpt2": gpt2, "llama": llama, "bert": bert,
          "vit": _timm("vit_base_patch16_224"), "convnext": _timm("convnext_tiny"),
          "resnet": _timm("resnet50")}


class _Converted(Exception):
    pass


def capture(model, batch, seq):
    """The converted joint graph of one training step; the step is not run.
    seq: a language model's sequence, an image model's side."""
    if isinstance(model, models.ImageLoss):
        kwargs = dict(images=torch.randn(batch, 3, seq, seq),
                      labels=torch.randint(0, 1000, (batch,)))
    else:
        x = torch.randint(0, model.config.vocab_size, (batch, seq))
        kwargs = dict(input_ids=x, labels=x)
    out = {}

    def partitioner(joint):
        out["graph"] = convert(joint).graph
        raise _Converted()

    fn = capture_lib.capture_module(model, partitioner, (), kwargs, "eager")
    try:
        with torch.enable_grad():
            fn(**kwargs)
    except _Converted:
        pass
    return out["graph"]


def plan(client, graph, ratio, chunking):
    request = _pl.GenerateRecomputePlanRequest(
        graph=graph, policy=_pl.RECOMPUTE_POLICY_AUTO,
        device=_dev.DeviceSpec(name="h100-80gb"), max_overhead_ratio=ratio,
        chunking=chunking)
    started = time.perf_counter()
    response = client.generate_recompute_plan(request)
    return response, time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,llama,bert")
    parser.add_argument("--ratio", type=float, default=0.05)
    args = parser.parse_args()
    torch.set_num_threads(2)
    rows = []
    with servers.Echod() as echod:
        client = PlannerClient(echod.address, timeout_seconds=600)
        for name in args.models.split(","):
            torch.manual_seed(0)
            model, batch, seq, dtype = MODELS[name]()
            model = model.to(dtype).train()
            started = time.perf_counter()
            graph = capture(model, batch, seq)
            captured = time.perf_counter() - started
            off, off_s = plan(client, graph, args.ratio, _pl.CHUNKING_MODE_OFF)
            auto, auto_s = plan(client, graph, args.ratio, _pl.CHUNKING_MODE_AUTO)
            chunks = ", ".join(f"{r.chunks} x {r.chunk_rows} rows"
                               for r in auto.chunked_regions) or "-"
            rows.append((name, len(graph.ops), batch, seq, str(dtype).split(".")[-1],
                         off.baseline_peak_bytes, off, auto, chunks, captured, off_s,
                         auto_s, list(auto.chunking_notes)))
            print(f"{name}: {len(graph.ops)} ops captured in {captured:.0f} s", flush=True)
            del model, graph
    print(f"\n| model | ops | batch x seq (image side) | dtype | plain peak | AUTO {100 * args.ratio:g}% "
          f"recompute only | AUTO {100 * args.ratio:g}% + chunked loss | chunks | extra "
          "compute | capture / plan times |\n|---|---|---|---|---|---|---|---|---|---|")
    for (name, ops, batch, seq, dtype, plain, off, auto, chunks, captured, off_s, auto_s,
         notes) in rows:
        print(f"| {name} | {ops} | {batch} x {seq} | {dtype} | {plain / GiB:.2f} GiB | "
              f"{off.planned_peak_bytes / GiB:.2f} GiB ({plain / off.planned_peak_bytes:.2f}x) | "
              f"{auto.planned_peak_bytes / GiB:.2f} GiB ({plain / auto.planned_peak_bytes:.2f}x) | "
              f"{chunks} | {100 * auto.recompute_overhead_ratio:.2f}% | {captured:.0f} s / "
              f"{off_s:.1f} s, {auto_s:.1f} s |")
        for note in notes:
            print(f"|  | not chunked: {note} |")


if __name__ == "__main__":
    main()
