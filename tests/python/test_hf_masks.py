"""Hugging Face's attention masks traced as eager builds them (hf_masks.py).

A Llama (the cache off, as under gradient checkpointing) and a BERT called
with an attention mask of all ones: the captured graph has no [batch, 1,
length, length] mask, as eager makes none, and the loss and gradients are
eager's. The same models with padding, and the Llama with packed position
ids, keep the mask (the capture is keyed on what the mask code saw) and
still match eager. No server: the plain planner runs the graph as traced.

Skipped, with the reason, without transformers.
"""
import copy
import unittest

import torch

import echo_torch
from echo_torch import hf_masks, optimize
from echo_torch.planners import PlainPlanner

try:
    import transformers
    NO_TRANSFORMERS = None
except ImportError as error:  # pragma: no cover - the venv installs it
    NO_TRANSFORMERS = f"transformers does not import: {error}"

BATCH, LENGTH = 2, 16


def _llama():
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, use_cache=False)
    return transformers.LlamaForCausalLM(config).train()


def _bert():
    config = transformers.BertConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(config).train()


def _square_masks(graph):
    """Tensors shaped like an expanded attention mask: [.., LENGTH, LENGTH]
    with the batch first, of any dtype."""
    return [t.id for t in graph.tensors
            if len(t.shape) == 4 and tuple(t.shape[-2:]) == (LENGTH, LENGTH)
            and t.shape[0] == BATCH and t.shape[1] == 1]


@unittest.skipIf(NO_TRANSFORMERS, NO_TRANSFORMERS)
class HfMaskTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.ids = torch.randint(0, 128, (BATCH, LENGTH))
        self.ones = torch.ones(BATCH, LENGTH, dtype=torch.long)
        self.padded = self.ones.clone()
        self.padded[1, -5:] = 0
        self.packed = torch.cat([torch.arange(10), torch.arange(6)]).expand(BATCH, -1)

    def _check_against_eager(self, make, **inputs):
        """Loss and gradients of a plain-planned optimize() against eager."""
        torch.manual_seed(1)
        model = make()
        eager = copy.deepcopy(model)
        wrapped = optimize(model, planner=PlainPlanner(), on_error="raise")
        got = wrapped(**inputs, labels=self.ids).loss
        want = eager(**inputs, labels=self.ids).loss
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want)
        for (name, a), b in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(a.grad, b.grad, msg=name)
        return wrapped

    def test_the_facts_are_what_eager_would_see(self):
        self.assertEqual(hf_masks.facts((), {"attention_mask": self.ones}),
                         ("unpadded", "unpacked"))
        self.assertEqual(hf_masks.facts((), {}), ("unpadded", "unpacked"))
        self.assertIsNone(hf_masks.facts((), {"attention_mask": self.padded}))
        self.assertIsNone(hf_masks.facts((), {"position_ids": self.packed}))
        self.assertIsNone(hf_masks.facts((), {"attention_mask": self.ones.to("meta")}))

    def test_all_ones_is_traced_without_a_mask_and_padding_with_one(self):
        for name, make in (("llama", _llama), ("bert", _bert)):
            with self.subTest(name):
                unpadded = echo_torch.capture_graph(make(), input_ids=self.ids,
                                                    attention_mask=self.ones).graph
                self.assertEqual(_square_masks(unpadded), [])
                padded = echo_torch.capture_graph(make(), input_ids=self.ids,
                                                  attention_mask=self.padded).graph
                self.assertNotEqual(_square_masks(padded), [])
        packed = echo_torch.capture_graph(_llama(), input_ids=self.ids,
                                          position_ids=self.packed).graph
        self.assertNotEqual(_square_masks(packed), [])

    def test_each_kind_of_call_is_its_own_capture_with_eager_numbers(self):
        for name, make in (("llama", _llama), ("bert", _bert)):
            with self.subTest(name):
                wrapped = self._check_against_eager(make, input_ids=self.ids,
                                                    attention_mask=self.ones)
                self._check_against_eager(make, input_ids=self.ids,
                                          attention_mask=self.padded)
                wrapped(input_ids=self.ids, attention_mask=self.ones, labels=self.ids)
                wrapped(input_ids=self.ids, attention_mask=self.padded, labels=self.ids)
                self.assertEqual(len(wrapped.reports()), 2)
        self._check_against_eager(_llama, input_ids=self.ids, position_ids=self.packed)


if __name__ == "__main__":
    unittest.main()
