#!/usr/bin/env python3
"""What users compare Echo with (issue 19): eager, the library's own
checkpointing, torch's selective checkpointing, torch's activation-memory
budget and Echo AUTO, per model, on the same inputs.

  build/venv/bin/python tests/python/bench_users.py \
      [--models gpt2,llama-gqa,bert-mlm,t5,nn-transformer-encoder] \
      (build/venv-vision/bin/python ... --models timm-vit-s,timm-resnet18,timm-convnext-atto)
      [--layers 4 --hidden 256 --seq 128 --batch 4 --vocab 8192] [--runs 2] \
      [--server HOST:PORT] [--out tests/python/users] [--render DIR]

Without --server it starts build/bin/echod (or $ECHO_ECHOD) on a free port
(servers.Echod). --render DIR rewrites DIR's tables and plots from
DIR/results.json without measuring.

Models (random weights from configs, train mode, the libraries' default
dropout; Hugging Face models called their canonical way,
`model(input_ids=x, labels=x, use_cache=False)`, the loss `out.loss`, the
whole output held through the backward as a training loop holds it):
GPT-2, Llama with grouped-query attention (heads/2 key/value heads), BERT
masked LM, T5 (encoder and decoder of --layers each, targets of seq/4
tokens), and the suite's nn.TransformerEncoder (test_third_party's: sequence
first, a linear head under cross-entropy over 10 classes, random input
features), test_third_party's nn.LSTM sequence-to-sequence model (2 LSTM
layers each side, --hidden wide; "library" checkpointing wraps each nn.LSTM
in torch.utils.checkpoint; torch.compile with allow_rnn) and, in the vision
venv, timm's ViT-S, ResNet-18 and ConvNeXt-atto (1,000 classes, 2 x --batch
images of 224x224; library checkpointing: set_grad_checkpointing()).
Sizes: --layers blocks, --hidden wide, 4 heads, FFN 4x hidden, --vocab
tokens, --batch x --seq.

Points (one training step each, torch.manual_seed(0) before every step):

  eager                the model as written;
  library checkpoint   Hugging Face: model.gradient_checkpointing_enable() at
                       its defaults (torch.utils.checkpoint, use_reentrant=
                       False, around every GradientCheckpointingLayer); the
                       nn.TransformerEncoder has no checkpointing of its own,
                       so each encoder layer's forward is wrapped in
                       torch.utils.checkpoint.checkpoint(use_reentrant=False),
                       which is what the Hugging Face option does;
  selective checkpoint torch.utils.checkpoint.checkpoint(use_reentrant=False,
                       context_fn=create_selective_checkpoint_contexts(policy))
                       around each block's forward (the blocks the library
                       checkpoints), as torchtitan's op-level selective AC
                       wraps each transformer block; the policy saves the
                       outputs of matmuls and attention (SAVE_OPS:
                       MUST_SAVE) and recomputes everything else
                       (PREFER_RECOMPUTE). torchtitan's own policy also
                       recomputes every second mm; this one saves them all;
  torch budget B       torch.compile(model, backend=aot_eager) under
                       torch._functorch.config.patch(activation_memory_budget=B),
                       B in 0.9, 0.7, 0.5, 0.3, 0.1: aot_eager's own
                       aot_autograd(boxed_nop, min_cut_rematerialization_partition)
                       with a partition_fn that records what it is given and
                       returns (torch._dynamo.reset() before each);
  Echo @ peak(P)       echo_torch.optimize(model, server=..., memory_limit_bytes=
                       <measured step peak of point P>) for each checkpointing
                       and budget point P. The limit is the measured peak as
                       is: harness.run_step's peak counts the tensors that
                       exist before the step (parameters, buffers, the batch)
                       plus the allocator's peak during it, which is what
                       echod's peak counts (parameters live the whole step,
                       the batch to its last reader, gradients and the
                       held outputs to the end), as bench_frontier.py passes
                       torch's peaks;
  Echo AUTO x%         optimize(model, server=..., max_overhead_ratio=x) for
                       x in 5%, 10%, 20%.
  Echo plans are priced on h100-80gb (the hook's default on CPU), every other
  option at its default except plan_cache=False.

Per point:

  step peak   harness.run_step: the pre-existing tensors plus the CPU
              allocator's peak during one forward+backward (tests/python/measure.py);
  held        harness.held_after_forward: what the forward leaves allocated
              beyond its outputs (allocator's live bytes when the forward
              returns, minus the outputs' storages). For eager, Echo and torch's
              partitions this is what autograd saves (the "saved" column,
              saved_tensors_hooks, as bench_frontier.py measures it); for
              checkpointing it also counts the block inputs and the selective
              policy's cached outputs, which live outside autograd's saved
              tensors (the hooks do not see them);
  extra       extra compute on the h100-80gb roofline (echod's cost model:
              EstimateMemory compute_time_seconds, device h100-80gb), as a
              percentage of the plain step:
                Echo: the plan's recompute_overhead_ratio (echo_torch.report);
                torch budget: bench_frontier.py's method: the ops of torch's
                  backward graph that are forward ops of the joint graph its
                  partition_fn got and that its forward graph also runs, priced
                  as copies of their echo ops (bench_frontier.Roofline.of_ops),
                  over the roofline of Echo's joint graph of the same step
                  (every op once);
                checkpointing: the multiset difference of the aten ops one
                  step runs with checkpointing and one eager step runs
                  (harness.op_calls, a TorchDispatchMode: the recomputed
                  forward ops; the selective policy's cached ops do not run),
                  each priced as an echo op built from the call (op class,
                  FLOPs, shapes and dtypes as echo_torch.convert makes them;
                  views free), less the eager ops the step does not run (none
                  for checkpointing), over the same pricing of the eager
                  step's whole op list. Cross-check of this method: the same
                  difference between Echo AUTO 5%'s step and the plain
                  partition's step, against the plan's ratio ("pricing
                  check"; a chunked loss runs its ops on row slices, so there
                  the difference has ops on both sides);
  step time   the fastest of --runs timed steps on this CPU (noisy: a shared
              2-core machine);
  gradients   loss and gradients against eager's (rtol 1e-4, atol 1e-6, as
              bench_frontier.same_training).

The bars (per model, printed after its table):
  1. Echo at the library checkpointing's measured peak: measured step peak
     <= that peak, at less extra compute than the checkpointing's;
  2. at each torch budget point: Echo @ peak(B) measured <= torch's measured
     peak, at no more extra compute (strict: no tolerance on either);
  3. Echo AUTO 5%: step peak below eager's.

Output: a markdown table and the bars per model on stdout; with --out DIR
(default tests/python/users) DIR/results.json, DIR/users.md and
DIR/<model>.png (x = extra compute %, y = measured step peak; left: all
points, right: held bytes).
"""
import argparse
import collections
import copy
import dataclasses
import json
import os
import platform
import sys
import time
import warnings

import torch
import torch.nn as nn

import harness
import models
import servers
from bench_frontier import Roofline, same_training, torch_recomputed
from frontier_report import BUDGETS, DEVICE, MIB
from echo_torch import ops, optimize, proto, report
from echo_torch.convert import JointGraph, convert
from echo_torch.tensor_meta import DTYPES

_g = proto.graph_pb2

MODEL_NAMES = ("gpt2", "llama-gqa", "bert-mlm", "t5", "nn-transformer-encoder",
               "nn-lstm-seq2seq")
# timm's, in the vision venv (make python-vision-venv): --models with these.
TIMM_NAMES = ("timm-vit-s", "timm-resnet18", "timm-convnext-atto")
# Families the suite does not test (bench_unseen.py), on request.
UNSEEN_NAMES = ("qwen2", "gpt-neox")
OVERHEADS = (0.05, 0.10, 0.20)
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "users")


def log(line):
    print(line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- models


@dataclasses.dataclass
class Size:
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    seq: int = 128
    batch: int = 4
    vocab: int = 8192


@dataclasses.dataclass
class Bench:
    """A model's training case and the blocks its checkpointing wraps."""
    case: harness.Case
    blocks: callable  # model -> the modules whose forwards are checkpointed
    library: callable  # model -> enables the library's own checkpointing
    library_label: str


def _hf_blocks(model):
    from transformers.modeling_layers import GradientCheckpointingLayer
    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def _hf_checkpointing(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # renamed in transformers 5
        model.gradient_checkpointing_enable()


def _hf(model, size, **kwargs):
    kwargs.setdefault("labels", kwargs["input_ids"])
    case = harness.Case(model.train(), kwargs=kwargs, loss_of=lambda out: out.loss)
    return Bench(case, _hf_blocks, _hf_checkpointing,
                 "library: gradient_checkpointing_enable()")


def _timm_blocks(model):
    """The blocks timm's set_grad_checkpointing checkpoints."""
    body = model.body
    if hasattr(body, "blocks"):  # ViT
        return list(body.blocks)
    if hasattr(body, "stages"):  # ConvNeXt
        return [b for stage in body.stages for b in stage.blocks]
    return [b for layer in (body.layer1, body.layer2, body.layer3, body.layer4)
            for b in layer]  # ResNet


TIMM_SIDE = 224


def _timm(name, size, side=TIMM_SIDE, **kwargs):
    """At 224x224 and 2 x --batch images, where activations, not the
    weights and their gradients, set the step peak."""
    import timm
    body = timm.create_model(name, pretrained=False, **kwargs)
    args = (torch.randn(2 * size.batch, 3, side, side),
            torch.randint(0, 1000, (2 * size.batch,)))
    return Bench(harness.Case(models.ImageLoss(body).train(), args), _timm_blocks,
                 lambda m: m.body.set_grad_checkpointing(True),
                 "library: set_grad_checkpointing()")


def _size_text(name, size: Size) -> str:
    """What `build` makes of the size flags for `name`."""
    if name in TIMM_NAMES:
        return f"{2 * size.batch} images of {TIMM_SIDE}x{TIMM_SIDE}, library defaults"
    if name == "nn-lstm-seq2seq":
        return (f"2 LSTM layers each side, hidden {size.hidden}, vocab {size.vocab}, "
                f"batch {size.batch} x {size.seq} source, {size.seq // 4 + 1} target tokens")
    return (f"{size.layers} layers, hidden {size.hidden}, {size.heads} heads, FFN "
            f"{4 * size.hidden}, vocab {size.vocab}, batch {size.batch} x seq {size.seq}")


def build(name, size: Size) -> Bench:
    torch.manual_seed(0)
    ffn = 4 * size.hidden
    if name == "nn-lstm-seq2seq":
        # test_third_party's (2 LSTM layers each side) at --vocab and
        # --hidden, targets of seq/4 tokens; torch.compile traces nn.LSTM
        # only with allow_rnn.
        from test_third_party import Seq2Seq
        torch._dynamo.config.allow_rnn = True
        model = Seq2Seq(size.vocab, size.hidden, size.hidden)
        args = (torch.randint(0, size.vocab, (size.seq, size.batch)),
                torch.randint(0, size.vocab, (size.seq // 4 + 1, size.batch)))
        return Bench(harness.Case(model.train(), args),
                     lambda m: [m.encoder, m.decoder],
                     lambda m: checkpoint_blocks([m.encoder, m.decoder]),
                     "checkpoint each nn.LSTM (torch.utils.checkpoint)")
    if name == "timm-vit-s":
        return _timm("vit_small_patch16_224", size)
    if name == "timm-resnet18":
        return _timm("resnet18", size)
    if name == "timm-convnext-atto":
        return _timm("convnext_atto", size)
    if name == "nn-transformer-encoder":
        from test_third_party import _Classify
        layer = nn.TransformerEncoderLayer(d_model=size.hidden, nhead=size.heads,
                                           dim_feedforward=ffn)
        model = _Classify(nn.TransformerEncoder(layer, num_layers=size.layers), size.hidden, 10)
        args = (torch.randn(size.seq, size.batch, size.hidden),
                torch.randint(0, 10, (size.seq, size.batch)))

        def per_layer(m):
            checkpoint_blocks(m.body.layers)

        return Bench(harness.Case(model.train(), args), lambda m: list(m.body.layers),
                     per_layer, "checkpoint per layer (torch.utils.checkpoint)")
    import transformers
    x = torch.randint(0, size.vocab, (size.batch, size.seq))
    if name == "gpt2":
        config = transformers.GPT2Config(n_layer=size.layers, n_embd=size.hidden,
                                         n_head=size.heads, vocab_size=size.vocab,
                                         n_positions=size.seq, bos_token_id=0, eos_token_id=0)
        return _hf(transformers.GPT2LMHeadModel(config), size, input_ids=x, use_cache=False)
    if name == "llama-gqa":
        config = transformers.LlamaConfig(
            num_hidden_layers=size.layers, hidden_size=size.hidden, intermediate_size=ffn,
            num_attention_heads=size.heads, num_key_value_heads=size.heads // 2,
            vocab_size=size.vocab, max_position_embeddings=size.seq, bos_token_id=0,
            eos_token_id=0)
        return _hf(transformers.LlamaForCausalLM(config), size, input_ids=x, use_cache=False)
    if name == "bert-mlm":
        config = transformers.BertConfig(num_hidden_layers=size.layers, hidden_size=size.hidden,
                                         intermediate_size=ffn, num_attention_heads=size.heads,
                                         vocab_size=size.vocab,
                                         max_position_embeddings=size.seq)
        return _hf(transformers.BertForMaskedLM(config), size, input_ids=x)
    if name == "t5":
        config = transformers.T5Config(num_layers=size.layers, num_decoder_layers=size.layers,
                                       d_model=size.hidden, d_ff=ffn, num_heads=size.heads,
                                       d_kv=size.hidden // size.heads, vocab_size=size.vocab,
                                       decoder_start_token_id=0, pad_token_id=0,
                                       eos_token_id=1)
        labels = torch.randint(0, size.vocab, (size.batch, size.seq // 4))
        return _hf(transformers.T5ForConditionalGeneration(config), size, input_ids=x,
                   labels=labels, use_cache=False)
    if name == "qwen2":
        config = transformers.Qwen2Config(
            num_hidden_layers=size.layers, hidden_size=size.hidden, intermediate_size=ffn,
            num_attention_heads=size.heads, num_key_value_heads=size.heads // 2,
            vocab_size=size.vocab, max_position_embeddings=size.seq)
        return _hf(transformers.Qwen2ForCausalLM(config), size, input_ids=x, use_cache=False)
    if name == "gpt-neox":
        config = transformers.GPTNeoXConfig(
            num_hidden_layers=size.layers, hidden_size=size.hidden, intermediate_size=ffn,
            num_attention_heads=size.heads, vocab_size=size.vocab,
            max_position_embeddings=size.seq)
        return _hf(transformers.GPTNeoXForCausalLM(config), size, input_ids=x, use_cache=False)
    raise ValueError(f"unknown model {name!r}")


# ---------------------------------------------------------------- checkpointing

# What the selective policy saves (MUST_SAVE): matmuls and attention, as
# torchtitan's op-level selective AC list (mm, the SDPA kernels), with the
# other matmul overloads a model on CPU runs (addmm: biased linears, GPT-2's
# Conv1D; bmm/baddbmm: attention written out; the SDPA CPU kernel).
SAVE_OPS = tuple(getattr(torch.ops.aten, name).default for name in (
    "mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention") if hasattr(torch.ops.aten, name))


def _save_matmuls(ctx, func, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy
    return (CheckpointPolicy.MUST_SAVE if func in SAVE_OPS
            else CheckpointPolicy.PREFER_RECOMPUTE)


def selective_context():
    from torch.utils.checkpoint import create_selective_checkpoint_contexts
    return create_selective_checkpoint_contexts(_save_matmuls)


def checkpoint_blocks(blocks, context_fn=None):
    """Each block's forward under torch.utils.checkpoint.checkpoint
    (use_reentrant=False; with context_fn: selective checkpointing)."""
    from torch.utils.checkpoint import checkpoint, noop_context_fn
    for block in blocks:
        inner = block.forward

        def forward(*args, _inner=inner, **kwargs):
            return checkpoint(_inner, *args, use_reentrant=False,
                              context_fn=context_fn or noop_context_fn, **kwargs)

        block.forward = forward


# ---------------------------------------------------------------- pricing


def calls_graph(calls, batch_size, name):
    """An echo graph with one op per OpCall (harness.op_calls), built as
    echo_torch.convert builds ops (op_type, op_class, FLOPs from the shapes,
    outputs of views 0 bytes), each reading tensors of its own: the
    roofline prices an op by its own work and bytes."""
    graph = _g.Graph(name=name, batch_size=batch_size)
    for k, call in enumerate(calls):
        op = graph.ops.add(id=f"op{k}", name=f"op{k}", op_type=ops.op_type(call.func),
                           op_class=ops.op_class(call.func), phase=_g.PHASE_FORWARD)
        tensors = [v for v in torch.utils._pytree.tree_leaves((call.args, call.kwargs))
                   if isinstance(v, harness.TensorInfo)]
        for i, info in enumerate(dict.fromkeys(tensors)):
            tid = f"op{k}.in{i}"
            graph.tensors.add(id=tid, name=tid, role=_g.TENSOR_ROLE_INPUT, shape=info.shape,
                              dtype=DTYPES.get(info.dtype, _g.DTYPE_UNSPECIFIED),
                              size_bytes=info.nbytes)
            op.input_ids.append(tid)
        views, written = ops.aliasing(call.func)
        views = views or []
        for i, info in enumerate(call.outputs):
            tid = f"op{k}.out{i}"
            view = (views[min(i, len(views) - 1)] if views else False) and not written
            graph.tensors.add(id=tid, name=tid, role=_g.TENSOR_ROLE_ACTIVATION,
                              shape=info.shape,
                              dtype=DTYPES.get(info.dtype, _g.DTYPE_UNSPECIFIED),
                              size_bytes=0 if view else info.nbytes)
            op.output_ids.append(tid)
        flops = ops.flops(call.func, call.args,
                          lambda a: a.shape if isinstance(a, harness.TensorInfo) else None,
                          [o.shape for o in call.outputs])
        if flops is not None:
            op.flops = flops
    return graph


def extra_calls(calls, reference):
    """(calls in `calls` beyond `reference`'s, and calls of `reference`
    missing from `calls`), as multisets."""
    have = collections.Counter(c.key() for c in reference)
    extra = []
    for call in calls:
        key = call.key()
        if have[key] > 0:
            have[key] -= 1
        else:
            extra.append(call)
    missing = []
    for call in reference:
        if have[call.key()] > 0:
            have[call.key()] -= 1
            missing.append(call)
    return extra, missing


def price_extra(roofline, calls, reference, batch_size, name):
    """Extra roofline % of a step's op list over a reference step's: the
    ops it runs beyond the reference's, less the reference's ops it does
    not run (none for checkpointing; a chunked loss runs its ops on slices
    instead of whole), over the reference's whole list."""
    extra, missing = extra_calls(calls, reference)

    def seconds(subset, tag):
        return roofline.full(calls_graph(subset, batch_size, f"{name}-{tag}")) if subset else 0.0

    full = seconds(reference, "reference")
    extra_seconds, missing_seconds = seconds(extra, "extra"), seconds(missing, "missing")
    return dict(extra_pct=100.0 * (extra_seconds - missing_seconds) / full if full else 0.0,
                extra_seconds=extra_seconds, missing_seconds=missing_seconds,
                reference_seconds=full, extra_ops=len(extra), missing_ops=len(missing),
                extra_op_types=dict(collections.Counter(ops.base_name(c.func) for c in extra)
                                    .most_common(12)))


# ---------------------------------------------------------------- one model


class Runner:
    def __init__(self, name, bench: Bench, client, roofline, runs):
        self.name = name
        self.bench = bench
        self.case = bench.case
        self.client = client
        self.roofline = roofline
        self.runs = runs
        self.points = []
        self.eager = None
        self.eager_calls = None
        self.joint_seconds = None  # roofline of Echo's joint graph of the step
        self.started = time.perf_counter()

    @property
    def batch(self):
        return self.case.args[0].shape[1] if self.case.args else \
            self.case.kwargs["input_ids"].shape[0]

    def run(self, wrapped, model=None):
        model = model or self.case.model
        case = dataclasses.replace(self.case, model=model)
        result = case.run(wrapped, timing_runs=self.runs)
        held, output = harness.held_after_forward(model, wrapped, case.args, kwargs=case.kwargs)
        return result, held, output

    def calls(self, wrapped, model=None, warm_up=False):
        return harness.op_calls(model or self.case.model, wrapped, self.case.args,
                                kwargs=self.case.kwargs, loss_of=self.case.loss_of,
                                warm_up=warm_up)

    def add(self, label, kind, result, held, output, extra_pct, **more):
        reference = self.eager or result
        loss_ok, grads_ok, diff = same_training(result, reference)
        point = dict(label=label, kind=kind, peak_bytes=int(result.peak_bytes),
                     held_bytes=int(held), saved_bytes=int(result.saved_bytes),
                     output_bytes=int(output), extra_pct=extra_pct,
                     seconds=result.seconds, loss=float(result.loss),
                     loss_matches_eager=loss_ok, grads_match_eager=grads_ok,
                     max_grad_diff=diff, **more)
        self.points.append(point)
        extra = "n/a" if extra_pct is None else f"{extra_pct:.2f}%"
        log(f"  [{self.name}] {label}: peak {point['peak_bytes'] / MIB:.2f} MiB, held "
            f"{held / MIB:.2f} MiB (saved {point['saved_bytes'] / MIB:.2f}), extra {extra}, "
            f"{result.seconds:.2f} s/step, grads {'=' if grads_ok else '!='} eager "
            f"({time.perf_counter() - self.started:.0f} s)")
        return point

    def failed(self, label, kind, error, **more):
        self.case.model.zero_grad(set_to_none=True)
        message = " ".join(f"{type(error).__name__}: {error}".split())[:300]
        self.points.append(dict(label=label, kind="failed", series=kind, error=message, **more))
        log(f"  [{self.name}] {label}: FAILED: {message}")

    # -- the points

    def eager_point(self):
        result, held, output = self.run(self.case.model)
        self.eager_calls = self.calls(self.case.model)
        point = self.add("eager", "eager", result, held, output, 0.0,
                         ops=len(self.eager_calls))
        self.eager = result
        return point

    def checkpoint_point(self, label, kind, enable):
        model = copy.deepcopy(self.case.model)
        enable(model)
        result, held, output = self.run(model, model)
        priced = price_extra(self.roofline, self.calls(model, model), self.eager_calls,
                             self.batch, f"{self.name}-{kind}")
        return self.add(label, kind, result, held, output, priced["extra_pct"],
                        extra_method="op-list difference vs eager", pricing=priced)

    def torch_point(self, budget):
        from torch._dynamo.backends.common import aot_autograd
        from torch._dynamo.backends.debugging import boxed_nop
        from torch._functorch.partitioners import min_cut_rematerialization_partition

        records = []

        def partition_fn(joint_module, joint_inputs, *, num_fwd_outputs, **kw):
            # Convert before partitioning: the partitioner may edit the joint.
            converted = convert(JointGraph(joint_module, num_fwd_outputs, [],
                                           name=f"{self.name}-graph{len(records)}"))
            fw, bw = min_cut_rematerialization_partition(
                joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kw)
            records.append(dict(converted=converted, bw=bw, fw_names={
                n.name for n in fw.graph.nodes if n.op == "call_function"}))
            return fw, bw

        backend = aot_autograd(fw_compiler=boxed_nop, bw_compiler=boxed_nop,
                               partition_fn=partition_fn, keep_inference_input_mutations=True)
        torch._dynamo.reset()
        try:
            with torch._functorch.config.patch(activation_memory_budget=budget):
                compiled = torch.compile(self.case.model, backend=backend)
                result, held, output = self.run(compiled)
        finally:
            torch._dynamo.reset()
        extra_seconds, recomputed, moved, graph_seconds = 0.0, 0, 0, 0.0
        for record in records:
            graph = record["converted"].graph
            indices, moved_ops = torch_recomputed(record)
            extra_seconds += self.roofline.of_ops(graph, indices)
            graph_seconds += self.roofline.full(graph)
            recomputed += len(indices)
            moved += len(moved_ops)
        return self.add(f"torch budget {budget}", "torch", result, held, output,
                        100.0 * extra_seconds / self.joint_seconds, budget=budget,
                        extra_method="recomputed ops of torch's partition (bench_frontier)",
                        graphs=len(records), recompute_executions=recomputed, moved_ops=moved,
                        torch_graphs_roofline_seconds=graph_seconds,
                        joint_roofline_seconds=self.joint_seconds)

    def echo_point(self, label, calls_check=False, **options):
        wrapped = optimize(self.case.model, server=self.client.address, on_error="raise",
                           plan_cache=False, **options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result, held, output = self.run(wrapped)
        notes = [str(w.message) for w in caught if "echo_torch" in str(w.message)]
        for note in notes:
            log(f"    {note}")
        rep = report(wrapped)
        if self.joint_seconds is None:
            self.joint_seconds = self.roofline.full(wrapped.converted.graph)
        more = dict(options=options, feasible=rep.feasible,
                    planned_peak_bytes=rep.planned_peak_bytes,
                    peak_lower_bound_bytes=rep.peak_lower_bound_bytes,
                    planned_saved_bytes=rep.planned_saved_bytes,
                    recompute_executions=rep.recompute_executions,
                    baseline_peak_bytes=rep.baseline_peak_bytes,
                    chunked_regions=[" ".join(str(r).split()) for r in rep.chunked_regions],
                    joint_ops=len(wrapped.converted.graph.ops), warnings=notes,
                    extra_method="plan's recompute_overhead_ratio")
        if calls_check:
            plain = harness.plain_module(self.case.model)
            plain_calls = self.calls(plain, warm_up=True)
            more["pricing_check"] = price_extra(self.roofline, self.calls(wrapped),
                                                plain_calls, self.batch,
                                                f"{self.name}-echo-check")
        if "memory_limit_bytes" in options:
            more["fits"] = result.peak_bytes <= options["memory_limit_bytes"]
        ratio = rep.predicted_extra_compute_ratio
        return self.add(label, "echo", result, held, output,
                        None if ratio is None else 100.0 * ratio, **more)

    def all_points(self):
        self.eager_point()
        # Echo 5% first: its joint graph is the torch points' denominator.
        label = f"Echo AUTO {OVERHEADS[0]:.0%}"
        self.try_point(label, "echo", self.echo_point, label, calls_check=True,
                       max_overhead_ratio=OVERHEADS[0])
        if self.joint_seconds is None:
            from echo_torch import capture_graph
            self.joint_seconds = self.roofline.full(
                capture_graph(self.case.model, *self.case.args, **self.case.kwargs).graph)
        limits = []
        for label, kind, enable in ((self.bench.library_label, "library", self.bench.library),
                                    ("selective checkpoint (save matmuls)", "selective",
                                     lambda m: checkpoint_blocks(self.bench.blocks(m),
                                                                 selective_context))):
            point = self.try_point(label, kind, self.checkpoint_point, label, kind, enable)
            if point:
                limits.append((point, kind))
        for budget in BUDGETS:
            point = self.try_point(f"torch budget {budget}", "torch", self.torch_point, budget)
            if point:
                limits.append((point, "torch"))
        for point, kind in limits:
            label = f"Echo @ peak({point['label']})"
            self.try_point(label, "echo", self.echo_point, label,
                           memory_limit_bytes=point["peak_bytes"])
            self.points[-1]["limit_of"] = point["label"]
        for overhead in OVERHEADS[1:]:
            label = f"Echo AUTO {overhead:.0%}"
            self.try_point(label, "echo", self.echo_point, label, max_overhead_ratio=overhead)

    def try_point(self, label, kind, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - a point that fails is reported
            self.failed(label, kind, error)
            return None


# ---------------------------------------------------------------- the bars


def bars(res):
    """The three bars of the brief, each with its numbers."""
    pts = [p for p in res["points"] if p["kind"] != "failed"]
    by_label = {p["label"]: p for p in pts}
    eager = by_label.get("eager")
    lines, verdicts = [], {}

    def at(label):
        return next((p for p in pts if p.get("limit_of") == label), None)

    def mib(b):
        return f"{b / MIB:.2f} MiB"

    library = next((p for p in pts if p["kind"] == "library"), None)
    if library:
        echo = at(library["label"])
        if echo is None:
            verdicts["library"] = None
            lines.append(f"1. {library['label']}: no Echo point (failed)")
        else:
            fits = echo["peak_bytes"] <= library["peak_bytes"]
            cheaper = echo["extra_pct"] < library["extra_pct"]
            verdicts["library"] = fits and cheaper
            lines.append(
                f"1. at the library checkpointing's peak ({mib(library['peak_bytes'])}): Echo "
                f"measured {mib(echo['peak_bytes'])} ({'fits' if fits else 'does NOT fit'}, "
                f"{(echo['peak_bytes'] - library['peak_bytes']) / 1024:+.1f} KiB; "
                f"planned {mib(echo['planned_peak_bytes'])}"
                + ("" if echo["feasible"] else ", echod: infeasible") + f") at "
                f"{echo['extra_pct']:.2f}% extra vs the checkpointing's "
                f"{library['extra_pct']:.2f}%: {'PASS' if fits and cheaper else 'FAIL'}")
    torch_rows = []
    for p in [p for p in pts if p["kind"] == "torch"]:
        echo = at(p["label"])
        if echo is None:
            torch_rows.append((p["label"], None))
            continue
        same_peak = echo["peak_bytes"] <= p["peak_bytes"]
        no_more = echo["extra_pct"] <= p["extra_pct"] + 1e-9
        torch_rows.append((p["label"], same_peak and no_more))
        lines.append(
            f"2. {p['label']} (peak {mib(p['peak_bytes'])}, {p['extra_pct']:.2f}% extra"
            + ("" if p["grads_match_eager"] else ", gradients differ from eager's")
            + f"): Echo {mib(echo['peak_bytes'])} "
            f"({(echo['peak_bytes'] - p['peak_bytes']) / 1024:+.1f} KiB) at "
            f"{echo['extra_pct']:.2f}% ({echo['extra_pct'] - p['extra_pct']:+.2f} pp): "
            + ("PASS" if same_peak and no_more else "FAIL"
               + ("" if same_peak else " (peak)") + ("" if no_more else " (compute)")))
    verdicts["torch"] = torch_rows
    five = by_label.get(f"Echo AUTO {OVERHEADS[0]:.0%}")
    if five and eager:
        below = five["peak_bytes"] < eager["peak_bytes"]
        verdicts["five"] = below
        lines.append(f"3. Echo AUTO 5%: step peak {mib(five['peak_bytes'])} vs eager "
                     f"{mib(eager['peak_bytes'])} ({eager['peak_bytes'] / five['peak_bytes']:.2f}x"
                     f", {five['extra_pct']:.2f}% extra): {'PASS' if below else 'FAIL'}")
    return lines, verdicts


# ---------------------------------------------------------------- output


def model_table(res):
    eager = next((p for p in res["points"] if p["label"] == "eager"), None)
    lines = [f"### {res['model']} ({res['parameters']:,} parameters, Echo's joint graph "
             f"{res.get('joint_ops', '?')} ops)", "",
             "| point | step peak MiB | vs eager | held MiB | saved (hooks) MiB | "
             "extra compute % (h100 roofline) | CPU step s | gradients = eager | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in res["points"]:
        if p["kind"] == "failed":
            lines.append(f"| {p['label']} | failed | | | | | | | "
                         f"{p['error'][:160].replace('|', '/')} |")
            continue
        notes = []
        if p["kind"] == "echo":
            if "memory_limit_bytes" in p["options"]:
                notes.append(f"limit {p['options']['memory_limit_bytes'] / MIB:.2f}, planned "
                             f"{p['planned_peak_bytes'] / MIB:.2f}"
                             + ("" if p["fits"] else ", measured above the limit"))
            if not p["feasible"]:
                notes.append(f"echod: infeasible (bound "
                             f"{p['peak_lower_bound_bytes'] / MIB:.2f})")
            notes.append(f"{p['recompute_executions']} recomputed")
            if p.get("chunked_regions"):
                notes.append(f"loss chunked ({len(p['chunked_regions'])} region)")
            check = p.get("pricing_check")
            if check:
                notes.append(f"pricing check: op-list difference {check['extra_pct']:.2f}% "
                             f"({check['extra_ops']} ops more, {check['missing_ops']} fewer "
                             "than the plain partition's step)")
        elif p["kind"] in ("library", "selective"):
            pr = p["pricing"]
            notes.append(f"{pr['extra_ops']} ops re-run")
            if pr["missing_ops"]:
                notes.append(f"{pr['missing_ops']} eager ops not run")
        elif p["kind"] == "torch":
            notes.append(f"{p['graphs']} graphs, {p['recompute_executions']} recomputed")
        if p["kind"] == "eager":
            vs = "1.00x"
        else:
            vs = f"{eager['peak_bytes'] / p['peak_bytes']:.2f}x" if eager else ""
        extra = "n/a" if p["extra_pct"] is None else f"{p['extra_pct']:.2f}"
        grads = "yes" if p["grads_match_eager"] else f"no (max diff {p['max_grad_diff']:.2g})"
        lines.append(f"| {p['label']} | {p['peak_bytes'] / MIB:.2f} | {vs} | "
                     f"{p['held_bytes'] / MIB:.2f} | {p['saved_bytes'] / MIB:.2f} | {extra} | "
                     f"{p['seconds']:.2f} | {grads} | {'; '.join(notes)} |")
    return lines


STYLE = {"eager": dict(color="black", marker="*", s=120),
         "library": dict(color="tab:green", marker="D", s=60),
         "selective": dict(color="tab:olive", marker="P", s=70),
         "torch": dict(color="tab:blue", marker="o", s=40),
         "echo": dict(color="tab:red", marker="s", s=40)}
NAMES = {"eager": "eager", "library": "library checkpointing",
         "selective": "selective checkpoint (save matmuls)",
         "torch": "torch activation_memory_budget", "echo": "Echo AUTO"}


def _tag(p, pts):
    """A point's label on the plot: the budget for torch, @<limit's point> or
    the overhead for Echo."""
    short = {"library": "lib", "selective": "sel", "eager": ""}
    if p["kind"] in short:
        return short[p["kind"]]
    if p["kind"] == "torch":
        return str(p["budget"])
    of = next((q for q in pts if q["label"] == p.get("limit_of")), None)
    if of is not None:
        return "@" + _tag(of, pts)
    return p["label"].replace("Echo AUTO ", "")


def plot(res, path):
    try:
        import matplotlib
    except ImportError:  # the vision venv has none: tables only
        log(f"no matplotlib: {path} not drawn")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in res["points"] if p["kind"] != "failed" and p["extra_pct"] is not None]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, key, ylabel in ((axes[0], "peak_bytes", "step peak MiB (measured)"),
                            (axes[1], "held_bytes", "MiB held for backward (measured)")):
        for kind, style in STYLE.items():
            series = [p for p in pts if p["kind"] == kind]
            if not series:
                continue
            good = [p for p in series if p["grads_match_eager"]]
            bad = [p for p in series if not p["grads_match_eager"]]
            ax.scatter([p["extra_pct"] for p in good], [p[key] / MIB for p in good],
                       label=NAMES[kind], zorder=3, **style)
            if bad:
                ax.scatter([p["extra_pct"] for p in bad], [p[key] / MIB for p in bad],
                           facecolors="none", edgecolors=style["color"], marker=style["marker"],
                           s=style["s"], zorder=3, label=f"{NAMES[kind]}: gradients != eager")
            for p in series:
                ax.annotate(_tag(p, pts), (p["extra_pct"], p[key] / MIB),
                            textcoords="offset points", xytext=(4, 3), fontsize=6,
                            color=style["color"])
        eager = next((p for p in pts if p["kind"] == "eager"), None)
        if eager:
            ax.axhline(eager[key] / MIB, color="gray", linestyle="--", linewidth=1)
        ax.set_xlabel("extra compute % (h100-80gb roofline)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{res['model']}: {res['size_text']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(results, meta, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(dict(meta=meta, models=results), f, indent=1)
    lines = ["# What users compare Echo with (issue 19)", "",
             "    build/venv/bin/python tests/python/bench_users.py " + " ".join(meta["argv"]),
             "", f"torch {meta['torch']}, transformers {meta['transformers']}, "
             f"{meta['threads']} threads, {meta['date']}; {meta['seconds']:.0f} s"
             + ("" if meta["complete"] else " (incomplete run)") + ". Definitions: the "
             "docstring of tests/python/bench_users.py.", ""]
    for res in results:
        lines += model_lines(res) + [""]
    with open(os.path.join(out, "users.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for res in results:
        plot(res, os.path.join(out, f"{res['model']}.png"))


def model_lines(res):
    bar_lines, _ = bars(res)
    return model_table(res) + [""] + [f"- {line}" for line in bar_lines]


def _git_head():
    import subprocess
    try:
        return subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="a running echod (default: start one)")
    parser.add_argument("--models", default=",".join(MODEL_NAMES),
                        help="comma-separated, from " + ",".join(MODEL_NAMES + TIMM_NAMES + UNSEEN_NAMES))
    for field in dataclasses.fields(Size):
        parser.add_argument(f"--{field.name}", type=int, default=field.default)
    parser.add_argument("--runs", type=int, default=2, help="timed steps per point")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help="results.json, users.md and a PNG per model (default %(default)s)")
    parser.add_argument("--render", metavar="DIR",
                        help="only rewrite DIR's users.md and plots from DIR/results.json")
    args = parser.parse_args(argv)
    if args.render:
        with open(os.path.join(args.render, "results.json")) as f:
            data = json.load(f)
        render(data["models"], data["meta"], args.render)
        for res in data["models"]:
            print("\n".join([""] + model_lines(res)))
        return 0
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for n in names:
        if n not in MODEL_NAMES + TIMM_NAMES + UNSEEN_NAMES:
            parser.error(f"unknown model {n!r}")
    size = Size(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Size)})
    torch.set_num_threads(2)
    import transformers
    transformers.logging.set_verbosity_error()
    size_text = _size_text("", size)
    meta = dict(torch=torch.__version__, transformers=transformers.__version__,
                threads=torch.get_num_threads(), machine=platform.machine(),
                date=time.strftime("%Y-%m-%d"), device=DEVICE, budgets=list(BUDGETS),
                overheads=list(OVERHEADS), size=dataclasses.asdict(size), argv=sys.argv[1:],
                runs=args.runs, commit=_git_head(), echod=servers.echod_path(),
                echod_built=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(os.path.getmtime(
                    servers.echod_path()))) if servers.echod_path() else None)
    started = time.perf_counter()
    results = []
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads, {meta['date']}; {size_text}")
    with servers.planner_client(args.server, timeout_seconds=600) as client:
        roofline = Roofline(client)
        for name in names:
            log(f"[{name}] ...")
            bench = build(name, size)
            runner = Runner(name, bench, client, roofline, args.runs)
            runner.all_points()
            echo = [p for p in runner.points if p.get("joint_ops")]
            res = dict(model=name, size_text=_size_text(name, size),
                       parameters=sum(p.numel() for p in bench.case.model.parameters()),
                       joint_ops=echo[0]["joint_ops"] if echo else None,
                       joint_roofline_seconds=runner.joint_seconds,
                       seconds=time.perf_counter() - runner.started, points=runner.points)
            results.append(res)
            print("\n".join([""] + model_lines(res)), flush=True)
            meta.update(seconds=time.perf_counter() - started,
                        complete=len(results) == len(names))
            if args.out:  # after every model: a long run leaves partial results
                render(results, meta, args.out)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
