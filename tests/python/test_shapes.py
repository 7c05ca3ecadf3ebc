"""Changing input shapes with one capture (issue 46, shape_family.py).

A GPT-2 (64 wide, 2 layers) trains over changing sequence lengths beside an
identical plain model; at every step the losses and every gradient are the
plain model's. `dynamic_shapes=True` traces once (symbolic sizes) and plans
each length without another trace; "auto" (the default) traces the first
shape as it is and once more, symbolic, at the second; False traces every
shape. Each length's report says its shapes and plans at most the plain
peak. A size the symbolic trace specialized (a batch of 1) gets a capture
of its own. The steps behave as autograd's: a backward twice with
retain_graph, two forwards before one backward, a forward without backward
freeing what it saved, an in-place change of a saved value refused.

Skipped, with the reason, without echod.
"""
import gc
import logging
import tempfile
import unittest
import weakref

import torch

import servers
import echo_torch
from test_models import ECHOD, SKIP_REASON

import transformers  # noqa: E402

VOCAB = 512


def _gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_layer=2, n_embd=64, n_head=4,
                                     n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config)


class _Captures(logging.Handler):
    """Counts the traces echo_torch logs ("captured ... in N s"), and the
    measurements it scaled rather than took."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.symbolic = 0
        self.static = 0
        self.scaled = 0

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("echo_torch: scaled the first size's"):
            self.scaled += 1
        if message.startswith("echo_torch: captured"):
            if "symbolic sizes" in message:
                self.symbolic += 1
            else:
                self.static += 1


@unittest.skipIf(ECHOD is None, SKIP_REASON)
class ShapeFamilyTest(servers.SharedEchod, unittest.TestCase):
    def setUp(self):
        self.captures = _Captures()
        logger = logging.getLogger("echo_torch")
        self._level = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(self.captures)
        self.cache = tempfile.TemporaryDirectory()

    def tearDown(self):
        logger = logging.getLogger("echo_torch")
        logger.removeHandler(self.captures)
        logger.setLevel(self._level)
        self.cache.cleanup()

    def _loop(self, policy, lengths, batch=2, padded=False):
        """Steps over `lengths` (or (batch, length) pairs) beside the plain
        model: losses and gradients equal at every step; returns the
        wrapped model. padded: the first row's last 3 tokens are padding
        (attention_mask 0, labels -100), as a collator pads a batch."""
        plain, model = _gpt2(), _gpt2()
        wrapped = echo_torch.optimize(model, server=self.echod.address,
                                      plan_cache=echo_torch.PlanCache(self.cache.name),
                                      dynamic_shapes=policy)
        generator = torch.Generator().manual_seed(1)
        for length in lengths:
            rows, length = length if isinstance(length, tuple) else (batch, length)
            ids = torch.randint(0, VOCAB, (rows, length), generator=generator)
            call = {"input_ids": ids, "labels": ids}
            if padded:
                mask = torch.ones_like(ids)
                mask[0, -3:] = 0
                call = {"input_ids": ids, "attention_mask": mask,
                        "labels": ids.masked_fill(mask == 0, -100)}
            expected = plain(**call).loss
            expected.backward()
            loss = wrapped(**call).loss
            loss.backward()
            self.assertTrue(echo_torch.report(wrapped).planned,
                            echo_torch.report(wrapped).unplanned_reason)
            self.assertEqual(loss.item(), expected.item(), f"length {length}")
            for (name, p), q in zip(plain.named_parameters(), model.parameters()):
                torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6,
                                           msg=f"{name} at length {length}")
            plain.zero_grad(set_to_none=True)
            model.zero_grad(set_to_none=True)
        return wrapped

    def test_symbolic_from_the_first_call_traces_once(self):
        wrapped = self._loop(True, [16, 24, 32, 24, 40])
        self.assertEqual((self.captures.symbolic, self.captures.static), (1, 0))
        reports = {r.shapes: r for r in wrapped.reports()}
        self.assertEqual(sorted(reports), sorted(f"(2, {n}), (2, {n})" for n in (16, 24, 32, 40)))
        for shapes, report in reports.items():
            self.assertLessEqual(report.planned_peak_bytes, report.baseline_peak_bytes, shapes)
        longest = reports["(2, 40), (2, 40)"]
        self.assertLess(longest.planned_peak_bytes, longest.baseline_peak_bytes)
        # A longer sequence holds more: the plans are the lengths' own.
        self.assertLess(reports["(2, 16), (2, 16)"].baseline_peak_bytes,
                        reports["(2, 40), (2, 40)"].baseline_peak_bytes)
        # Later sizes are priced with the first size's measurement, scaled.
        self.assertEqual(self.captures.scaled, 3)

    def test_auto_traces_the_second_shape_symbolic(self):
        self._loop("auto", [16, 24, 32, 40, 16])
        self.assertEqual((self.captures.static, self.captures.symbolic), (1, 1))

    def test_auto_keeps_the_dimensions_that_did_not_change_static(self):
        # Lengths changed, so only the length is symbolic: a new batch size
        # is not run by that capture (its graph holds the batch), it gets
        # a capture of its own.
        self._loop("auto", [16, 24, (3, 24), 32])
        self.assertEqual((self.captures.static, self.captures.symbolic), (2, 1))

    def test_inputs_that_share_a_length(self):
        # The ids, mask and labels each get a symbol; the trace finds them
        # equal (a replacement and guards), which every later call keeps.
        self._loop("auto", [20, 28, 24, 28], padded=True)
        self.assertEqual((self.captures.static, self.captures.symbolic), (1, 1))

    def test_batch_and_length_both_change(self):
        wrapped = self._loop(True, [16, 24, (3, 20)])
        self.assertEqual(echo_torch.report(wrapped).shapes, "(3, 20), (3, 20)")
        self.assertEqual((self.captures.symbolic, self.captures.static), (1, 0))

    def test_off_traces_every_shape(self):
        self._loop(False, [16, 24, 32])
        self.assertEqual((self.captures.static, self.captures.symbolic), (3, 0))

    def test_a_specialized_size_gets_its_own_capture(self):
        # Sizes 0 and 1 specialize in a symbolic trace (as in torch.compile):
        # a batch of 1 breaks the guards, and is traced for itself.
        self._loop(True, [16, (1, 16), 24])
        self.assertEqual((self.captures.symbolic, self.captures.static), (1, 1))

    def _pair(self):
        plain, model = _gpt2(), _gpt2()
        wrapped = echo_torch.optimize(model, server=self.echod.address,
                                      plan_cache=echo_torch.PlanCache(self.cache.name),
                                      dynamic_shapes=True, on_error="raise")
        return plain, model, wrapped

    def _assert_same_gradients(self, plain, model):
        for (name, p), q in zip(plain.named_parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)

    def test_backward_twice_with_retain_graph(self):
        plain, model, wrapped = self._pair()
        ids = torch.randint(0, VOCAB, (2, 16))
        for net in (plain, wrapped):
            loss = net(ids, labels=ids).loss
            loss.backward(retain_graph=True)
            loss.backward()
        self._assert_same_gradients(plain, model)
        # After ordinary steps too: nothing was donated to their backward.
        # (A capture per shape is AOTAutograd's as torch.compile's: it
        # donates the saved values and then refuses retain_graph.)
        plain, model, again = self._pair()
        for net in (plain, again):
            net(ids, labels=ids).loss.backward()
            loss = net(ids, labels=ids).loss
            loss.backward(retain_graph=True)
            loss.backward()
        self._assert_same_gradients(plain, model)
        # Without retain_graph, a second backward is refused, naming why.
        loss = wrapped(ids, labels=ids).loss
        loss.backward()
        with self.assertRaisesRegex(Exception, "backward ran already|backward through"):
            loss.backward()

    def test_two_forwards_then_one_backward(self):
        plain, model, wrapped = self._pair()
        first, second = torch.randint(0, VOCAB, (2, 16)), torch.randint(0, VOCAB, (2, 24))
        for net in (plain, wrapped):
            (net(first, labels=first).loss + net(second, labels=second).loss).backward()
        self._assert_same_gradients(plain, model)

    def test_a_forward_without_backward_frees_what_it_saved(self):
        # `hidden` is an output the backward reads (the square's gradient):
        # saved as it is, it would hold its autograd node, which holds it.
        class Square(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(16, 16)

            def forward(self, x):
                hidden = self.linear(x)
                return hidden, (hidden * hidden).mean()

        wrapped = echo_torch.optimize(Square(), server=self.echod.address,
                                      plan_cache=echo_torch.PlanCache(self.cache.name),
                                      dynamic_shapes=True, on_error="raise")
        for rows in (4, 8):
            wrapped(torch.randn(rows, 16))[1].backward()  # plans both sizes
            hidden, _ = wrapped(torch.randn(rows, 16))
            alive = weakref.ref(hidden)
            del hidden, _
            gc.collect()
            self.assertIsNone(alive(), "a forward's outputs outlive it with no backward")

    def test_an_in_place_change_before_the_backward_is_refused(self):
        _, model, wrapped = self._pair()
        ids = torch.randint(0, VOCAB, (2, 16))
        loss = wrapped(ids, labels=ids).loss
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        with self.assertRaisesRegex(RuntimeError, "inplace"):
            loss.backward()

    def test_bad_policy_is_refused(self):
        with self.assertRaisesRegex(ValueError, "dynamic_shapes"):
            echo_torch.optimize(_gpt2(), server=self.echod.address, dynamic_shapes="yes")


if __name__ == "__main__":
    unittest.main()
