"""Shapes where two sizes coincide, planned through `optimize()` against one
shared echod, as a user would send them (issue 49: a tiny GPT-2 at batch x
length = vocabulary crashed the node's echod).

A loss's rows are batch x length; the planner reads tensor layouts from
shapes, so a shape where rows equal the classes ([rows, rows] logits and
their transposed gradient), the width, the positions or the heads can read
as another layout. Each case: Hugging Face's GPT-2 or Llama built from a
config with random weights at such a shape, trained one step with
`model(input_ids=x, labels=x)` and chunking at its default `auto`, planned
(never a fallback: on_error="raise"), with eager's loss and gradients
(chunked sums: rtol 1e-4, atol 1e-6). After every case the shared echod is
still the same process, and serving. Where the loss's rows equal the
classes the plan must still chunk it (the transposed gradient is told apart
from the rows, not refused).

Skipped, with the reason, without echod or transformers.
"""
import unittest

import torch

import harness
from test_models import ECHOD, SKIP_REASON, EchodChecks, _log
from echo_torch import optimize, report

try:
    import transformers
    NO_TRANSFORMERS = None
except ImportError as error:  # pragma: no cover - the venv installs it
    NO_TRANSFORMERS = f"transformers does not import: {error}"


def _gpt2(vocab, width=64, heads=4, layers=2, positions=256):
    config = transformers.GPT2Config(vocab_size=vocab, n_embd=width, n_head=heads,
                                     n_layer=layers, n_positions=positions)
    return transformers.GPT2LMHeadModel(config)


def _llama(vocab, width=64, heads=4, kv_heads=2, layers=2, positions=256,
           intermediate=128):
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=width, num_attention_heads=heads,
        num_key_value_heads=kv_heads, num_hidden_layers=layers,
        intermediate_size=intermediate, max_position_embeddings=positions)
    return transformers.LlamaForCausalLM(config)


# name -> (model factory, batch, length, whether the loss must be chunked).
# Hugging Face's causal loss pads the labels and keeps every position:
# rows = batch x length.
CASES = {
    # The crash of issue 49 and the two shapes it named beside it (too few
    # rows for chunks of kDefaultMinChunkRows to pay), then rows = vocabulary
    # large enough that the loss is chunked.
    "gpt2 rows=vocab 4x32 v128": (lambda: _gpt2(128), 4, 32, False),
    "gpt2 rows=vocab 4x128 v512": (lambda: _gpt2(512), 4, 128, False),
    "gpt2 rows=vocab 8x125 v1000": (lambda: _gpt2(1000, positions=128), 8, 125, False),
    "gpt2 rows=vocab 4x512 v2048": (lambda: _gpt2(2048, positions=512), 4, 512, True),
    "gpt2 vocab=width": (lambda: _gpt2(64, width=64), 2, 16, False),
    "gpt2 rows=width": (lambda: _gpt2(256, width=64), 2, 32, False),
    "gpt2 length=positions": (lambda: _gpt2(256, positions=32), 2, 32, False),
    "gpt2 batch=heads": (lambda: _gpt2(256, heads=4), 4, 16, False),
    # One target per sequence (a single token has none: its loss is NaN).
    "gpt2 two tokens": (lambda: _gpt2(256), 4, 2, False),
    "gpt2 odd head size": (lambda: _gpt2(256, width=60, heads=4), 2, 16, False),
    "gpt2 sizes of one": (lambda: _gpt2(256, width=8, heads=1, layers=1), 1, 8, False),
    "llama rows=vocab 4x32 v128": (lambda: _llama(128), 4, 32, False),
    "llama rows=vocab 4x512 v2048": (lambda: _llama(2048, positions=512), 4, 512, True),
    "llama vocab=width": (lambda: _llama(64, width=64), 2, 16, False),
    "llama rows=intermediate": (lambda: _llama(256, intermediate=32), 2, 16, False),
    "llama batch=heads one kv head": (lambda: _llama(256, kv_heads=1), 4, 16, False),
    "llama odd head count": (lambda: _llama(256, width=48, heads=3, kv_heads=1), 2, 16,
                             False),
    "llama length=positions": (lambda: _llama(256, positions=32), 2, 32, False),
}


@unittest.skipIf(ECHOD is None or NO_TRANSFORMERS, SKIP_REASON or NO_TRANSFORMERS)
class ShapeCoincidenceTest(EchodChecks, unittest.TestCase):
    def test_every_case_plans_with_eager_gradients_and_echod_stays_up(self):
        pid = self.echod.process.pid
        for name, (factory, batch, length, must_chunk) in CASES.items():
            with self.subTest(name):
                torch.manual_seed(0)
                model = factory().train()
                vocab = model.config.vocab_size
                ids = torch.randint(0, vocab, (batch, length))
                case = harness.Case(model, kwargs={"input_ids": ids, "labels": ids},
                                    loss_of=lambda out: out.loss)
                eager = case.run(model)
                # A budget wide enough that chunking is affordable at these
                # sizes (each chunk's launches are its cost on the roofline).
                wrapped = optimize(model, server=self.echod.address, max_overhead_ratio=1.0,
                                   plan_cache=False, on_error="raise")
                planned = case.run(wrapped)
                self.assert_same_training(planned, eager)
                rep = report(wrapped)
                self.assertTrue(rep.planned, rep)
                if must_chunk:
                    self.assertGreaterEqual(len(rep.chunked_regions), 1,
                                            f"{name}: {rep.chunking_notes}")
                _log(f"[{name}] rows {batch * length}, vocabulary {vocab}: "
                     f"{len(rep.chunked_regions)} chunked region(s), peak "
                     f"{rep.baseline_peak_bytes:,} -> {rep.planned_peak_bytes:,}")
                self.assertIsNone(self.echod.process.poll(), f"echod died after {name}")
                self.assertEqual(self.echod.process.pid, pid)
                self.client.wait_ready(5.0)


if __name__ == "__main__":
    unittest.main()
