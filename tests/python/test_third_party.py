"""Models from other libraries, built from configs with random weights and
optimized as a new user would: `echo_torch.optimize(model, server=...)` and
nothing else, called the library's canonical way (Hugging Face:
`model(input_ids=x, labels=x)`, output held through `out.loss.backward()`).

Per model (test_models.EchodChecks): echo_torch did not fall back; the plain
partition and the plan give eager's loss and gradients (rtol 1e-4, atol
1e-6); the bytes the forward saves are the graph's and the plan's; the
measured step peak is within 1% of echod's prediction. Hugging Face models
also: the gradient of the logits (returned beside the loss, unused) is
planned away and never made, and the report counts the logits as held.

transformers models: GPT-2 and BERT (tied input/output embeddings), Llama
with grouped-query attention, T5 (encoder-decoder, its cache); torch's
nn.TransformerEncoder and an nn.LSTM sequence-to-sequence model; timm's
ViT-S, ResNet-18 and ConvNeXt-atto where timm imports (it needs torchvision:
skipped with the import error otherwise). Skipped, with the reason, without
echod or transformers.
"""
import os
import unittest
import warnings

import torch
import torch.nn as nn

import harness
from test_models import ECHOD, SKIP_REASON, EchodChecks, _log
import echo_torch
from echo_torch import optimize, report

try:
    import transformers
    NO_TRANSFORMERS = None
except ImportError as error:  # pragma: no cover - the venv installs it
    NO_TRANSFORMERS = f"transformers does not import: {error}"

try:
    import timm
    NO_TIMM = None
except Exception as error:  # noqa: BLE001 - timm fails on a torchvision it cannot load
    NO_TIMM = f"timm does not import: {type(error).__name__}: {error}"
    # The vision venv (make python-vision-venv) must run them, not skip.
    if os.environ.get("ECHO_REQUIRE_TIMM"):
        raise

VOCAB = 4096
BATCH, LENGTH = 4, 64


def _tokens(length=LENGTH):
    return torch.randint(0, VOCAB, (BATCH, length))


def _hf_case(model, **kwargs):
    return harness.Case(model.train(), kwargs=kwargs, loss_of=lambda out: out.loss)


def gpt2():
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                     n_positions=LENGTH)
    x = _tokens()
    return _hf_case(transformers.GPT2LMHeadModel(config), input_ids=x, labels=x)


def llama_gqa():
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=LENGTH)
    x = _tokens()
    return _hf_case(transformers.LlamaForCausalLM(config), input_ids=x, labels=x)


def bert_masked_lm():
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64,
                                     intermediate_size=128, num_attention_heads=4,
                                     vocab_size=VOCAB, max_position_embeddings=LENGTH)
    x = _tokens()
    return _hf_case(transformers.BertForMaskedLM(config), input_ids=x, labels=x)


def t5():
    config = transformers.T5Config(num_layers=2, num_decoder_layers=2, d_model=64, d_ff=128,
                                   num_heads=4, d_kv=16, vocab_size=VOCAB,
                                   decoder_start_token_id=0, pad_token_id=0)
    return _hf_case(transformers.T5ForConditionalGeneration(config), input_ids=_tokens(),
                    labels=_tokens(LENGTH // 4))


class _Classify(nn.Module):
    """A body and a linear head under cross-entropy (the loss of a user's step)."""

    def __init__(self, body, features, classes):
        super().__init__()
        self.body = body
        self.head = nn.Linear(features, classes)

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.head(self.body(x)).flatten(0, -2),
                                           y.flatten())


def transformer_encoder():
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128)
    model = _Classify(nn.TransformerEncoder(layer, num_layers=2), 64, 10)
    # Sequence first: nn.TransformerEncoderLayer's default (batch_first=False).
    return harness.Case(model.train(), (torch.randn(LENGTH, BATCH, 64),
                                        torch.randint(0, 10, (LENGTH, BATCH))))


class Seq2Seq(nn.Module):
    def __init__(self, vocab=512, embed=32, hidden=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.encoder = nn.LSTM(embed, hidden, num_layers=2)
        self.decoder = nn.LSTM(embed, hidden, num_layers=2)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, source, target):
        _, state = self.encoder(self.embed(source))
        hidden, _ = self.decoder(self.embed(target[:-1]), state)
        return nn.functional.cross_entropy(self.out(hidden).flatten(0, 1), target[1:].flatten())


def lstm_seq2seq():
    return harness.Case(Seq2Seq().train(), (torch.randint(0, 512, (24, BATCH)),
                                            torch.randint(0, 512, (17, BATCH))))


def _timm_case(name, **kwargs):
    body = timm.create_model(name, pretrained=False, num_classes=0, **kwargs)
    model = _Classify(body, body.num_features, 10)
    return harness.Case(model.train(), (torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))))


@unittest.skipIf(ECHOD is None, SKIP_REASON)
class ThirdPartyModelsTest(EchodChecks, unittest.TestCase):
    def check_defaults(self, name, case, hugging_face=False):
        """optimize(model, server=...) at every other default."""
        torch.manual_seed(0)
        eager, plain = self.check_plain(name, case, exact=False)
        if self.plans_unavailable:
            self.skipTest(self.plans_unavailable)
        wrapped = optimize(case.model, server=self.echod.address)
        planned = case.run(wrapped)
        self.assertIsNone(wrapped.fallback_reason)
        rep = self.check_planned(f"{name} AUTO at defaults", planned, plain, eager)
        if hugging_face:
            self.assert_logits_planned(case, rep)
        return rep

    def assert_logits_planned(self, case, rep):
        """The logits' gradient is planned as never sent; the logits, which
        the caller holds, are counted as held."""
        self.assertGreaterEqual(len(rep.unused_output_gradients), 1)
        with torch.no_grad():
            logits = case.model(**case.kwargs).logits
        self.assertGreaterEqual(rep.output_bytes, logits.numel() * logits.element_size())

    @unittest.skipIf(NO_TRANSFORMERS, NO_TRANSFORMERS)
    def test_gpt2(self):
        self.check_defaults("gpt2", gpt2(), hugging_face=True)

    @unittest.skipIf(NO_TRANSFORMERS, NO_TRANSFORMERS)
    def test_llama_grouped_query_attention(self):
        self.check_defaults("llama-gqa", llama_gqa(), hugging_face=True)

    @unittest.skipIf(NO_TRANSFORMERS, NO_TRANSFORMERS)
    def test_bert_masked_lm(self):
        self.check_defaults("bert-mlm", bert_masked_lm(), hugging_face=True)

    @unittest.skipIf(NO_TRANSFORMERS, NO_TRANSFORMERS)
    def test_t5(self):
        self.check_defaults("t5", t5(), hugging_face=True)

    def test_transformer_encoder(self):
        self.check_defaults("nn.TransformerEncoder", transformer_encoder())

    def test_lstm_seq2seq(self):
        self.check_defaults("nn.LSTM seq2seq", lstm_seq2seq())

    @unittest.skipIf(NO_TIMM, NO_TIMM)
    def test_timm_vit_small(self):
        self.check_defaults("timm vit_small", _timm_case("vit_small_patch16_224",
                                                         img_size=32))

    @unittest.skipIf(NO_TIMM, NO_TIMM)
    def test_timm_resnet18(self):
        self.check_defaults("timm resnet18", _timm_case("resnet18"))

    @unittest.skipIf(NO_TIMM, NO_TIMM)
    def test_timm_convnext_atto(self):
        self.check_defaults("timm convnext_atto", _timm_case("convnext_atto"))

    @unittest.skipIf(NO_TRANSFORMERS, NO_TRANSFORMERS)
    def test_a_gradient_through_the_logits_is_used_and_warned_about(self):
        torch.manual_seed(0)
        case = gpt2()
        case.loss_of = lambda out: out.loss + out.logits.square().mean()
        eager = case.run(case.model)
        # Recompute only: the logits' gradient is used, and the step holds
        # it beyond the prediction, which a warning says.
        wrapped = optimize(case.model, server=self.echod.address, on_error="raise",
                           chunking="off")
        with self.assertWarnsRegex(RuntimeWarning, "assumed unused"):
            planned = case.run(wrapped)
        self.assert_same_training(planned, eager)

    @unittest.skipIf(NO_TRANSFORMERS, NO_TRANSFORMERS)
    def test_a_gradient_through_the_logits_of_a_chunked_loss_is_refused(self):
        """A chunked loss takes the logits' gradient as zero (its forward
        step computes the gradients before any is sent): one that comes is
        an error naming the fix, never a silently wrong gradient."""
        torch.manual_seed(0)
        case = gpt2()
        case.loss_of = lambda out: out.loss + out.logits.square().mean()
        wrapped = optimize(case.model, server=self.echod.address, on_error="raise",
                           max_overhead_ratio=1.0)
        with self.assertRaisesRegex(Exception, "chunking='off'"):
            case.run(wrapped)
        self.assertTrue(report(wrapped).chunked_regions)

    def check_compiled(self, name, case):
        """torch.compile(model, backend=echo_torch.backend(server=...)) at
        every other default: planned, eager's gradients, the graphs'
        reports summed in report(compiled)."""
        torch.manual_seed(0)
        eager = case.run(case.model)
        backend = echo_torch.backend(server=self.echod.address)
        compiled = torch.compile(case.model, backend=backend)
        try:
            got = case.run(compiled)
        finally:
            torch._dynamo.reset()
        self.assertIsNone(backend.fallback_reason)
        self.assert_same_training(got, eager)
        rep = report(compiled)
        self.assertGreaterEqual(len(backend.reports()), 1)
        self.assertEqual(rep.ops, sum(r.ops for r in backend.reports()))
        # Never more (ViT-S at 32x32 peaks at its weights: nothing to plan).
        self.assertLessEqual(rep.planned_saved_bytes, rep.default_saved_bytes)
        _log(f"[{name} torch.compile] {len(backend.reports())} graphs, {rep.ops} ops; saved "
             f"{rep.default_saved_bytes:,} -> {rep.planned_saved_bytes:,}; measured peak "
             f"{got.peak_bytes:,} (eager {eager.peak_bytes:,})")

    @unittest.skipIf(NO_TRANSFORMERS, NO_TRANSFORMERS)
    def test_hugging_face_under_torch_compile(self):
        for name, make in (("gpt2", gpt2), ("llama-gqa", llama_gqa),
                           ("bert-mlm", bert_masked_lm), ("t5", t5)):
            with self.subTest(name):
                self.check_compiled(name, make())

    @unittest.skipIf(NO_TIMM, NO_TIMM)
    def test_timm_under_torch_compile(self):
        for name, kwargs in (("vit_small_patch16_224", {"img_size": 32}), ("resnet18", {}),
                             ("convnext_atto", {})):
            with self.subTest(name):
                self.check_compiled(f"timm {name}", _timm_case(name, **kwargs))

    def test_torch_nn_under_torch_compile(self):
        self.check_compiled("nn.TransformerEncoder", transformer_encoder())
        # Dynamo traces nn.LSTM only with allow_rnn (api.py says so when
        # the backend sees no graph).
        with torch._dynamo.config.patch(allow_rnn=True):
            self.check_compiled("nn.LSTM seq2seq", lstm_seq2seq())


@unittest.skipIf(NO_TRANSFORMERS, NO_TRANSFORMERS)
class HuggingFaceCaptureTest(unittest.TestCase):
    """What the capture makes of Hugging Face's canonical call (no server)."""

    def test_labels_equal_to_input_ids_is_one_input_and_the_batch(self):
        # labels=input_ids passes one tensor twice: the graph has one input
        # primal, every parameter is a PARAMETER (tied wte/lm_head once),
        # and the batch is the input's, not a parameter's first axis.
        case = gpt2()
        converted = echo_torch.capture_graph(case.model, **case.kwargs)
        graph = converted.graph
        by_id = {t.id: t for t in graph.tensors}
        roles = [by_id[converted.tensor_of[n]].role for n in converted.primal_nodes]
        parameters = len(list(case.model.parameters()))  # tied weights counted once
        self.assertEqual(roles.count(echo_torch.proto.graph_pb2.TENSOR_ROLE_PARAMETER),
                         parameters)
        self.assertEqual(roles.count(echo_torch.proto.graph_pb2.TENSOR_ROLE_INPUT), 1)
        self.assertEqual(graph.batch_size, BATCH)

    def test_the_step_runs_as_configured_and_returns_no_cache(self):
        # use_cache stays on (the graph is eager's: its key/value copies are
        # what attention reads); the cache object, which AOTAutograd cannot
        # return, comes back as None.
        case = gpt2()
        self.assertTrue(case.model.config.use_cache)
        wrapped = optimize(case.model, planner=echo_torch.planners.PlainPlanner(),
                           on_error="raise")
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            out = wrapped(**case.kwargs)
        self.assertIsNone(out.past_key_values)
        self.assertTrue(case.model.config.use_cache)


if __name__ == "__main__":
    unittest.main()
