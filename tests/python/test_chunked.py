"""Chunked loss regions through the hook (docs/pytorch.md, "Chunked loss").

A language model's head (projection, log-softmax, NLL) at sizes where echod
chooses to chunk it: the loss and gradients equal eager's within the
tolerance chunked sums allow (loss rtol 1e-5; gradients rtol 1e-4, atol
1e-6: each chunk adds its share of the projection's gradient, in another
order than one matmul), the forward saves what the plan says, and the
measured peak is within 1% of echod's prediction. Cross-entropy's options
are honoured: ignore_index, reduction, class weights, bf16 autocast; label
smoothing is left unchunked and the plan says why.

Skipped, with the reason printed, when echod is not built.
"""
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

import harness
import servers
import echo_torch
from echo_torch import optimize, report
from test_models import ECHOD, SKIP_REASON, EchodChecks

ROWS, VOCAB, DIM = 512, 4096, 64


class LMHead(nn.Module):
    """Embedding, layer norm, an output projection and cross-entropy."""

    def __init__(self, cast=False, **loss_kwargs):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.cast = cast
        if "weight" in loss_kwargs:
            self.register_buffer("class_weight", loss_kwargs.pop("weight"))
        else:
            self.class_weight = None
        self.loss_kwargs = loss_kwargs

    def forward(self, ids, labels):
        logits = self.head(self.norm(self.embed(ids)))
        if self.cast:
            logits = logits.float()
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1),
                               weight=self.class_weight, **self.loss_kwargs)


class StepwiseHead(nn.Module):
    """Logits projected per time step and stacked (as the suite's NMT
    decoder does): each step's projection, and its backward, is a block of
    the region that runs once, in the chunk holding the step's rows, and the
    steps' weight gradients add into one."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, ids, labels):
        h = self.embed(ids)
        logits = torch.stack([self.head(h[:, t]) for t in range(h.shape[1])])
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.t().reshape(-1))


def _inputs(ignored=0):
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (4, ROWS // 4), generator=generator)
    labels = torch.randint(0, VOCAB, (4, ROWS // 4), generator=generator)
    labels.view(-1)[:ignored] = -100
    return ids, labels


@unittest.skipIf(ECHOD is None, SKIP_REASON)
class ChunkedLossTest(EchodChecks, unittest.TestCase):
    def run_case(self, model, inputs, expect_chunks=True, bf16=False):
        torch.manual_seed(0)
        case = harness.Case(model, inputs)
        eager = case.run(model)
        # A budget wide enough that the chunks' launches are affordable at
        # this small size (they are what it costs on the roofline).
        wrapped = optimize(model, server=self.echod.address, max_overhead_ratio=1.0,
                           plan_cache=False, on_error="raise")
        planned = case.run(wrapped)
        if bf16:
            # The projection's gradient sums its chunks in bf16, rounding
            # once per chunk where one matmul rounds once: bf16's relative
            # tolerance (1.6e-2), also as an absolute one on the tensor's
            # scale for elements near zero.
            torch.testing.assert_close(planned.loss, eager.loss, rtol=1e-5, atol=1e-6)
            for got, want in zip(planned.grads, eager.grads):
                scale = want.abs().max().item()
                torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1.6e-2 * scale)
            planned.grads = eager.grads  # checked; the rest as for fp32
        rep = self.check_planned("lm head", planned, eager, eager)
        regions = rep.chunked_regions
        if expect_chunks:
            self.assertEqual(len(regions), 1, rep.message)
            self.assertGreaterEqual(regions[0].chunks, 2)
            self.assertIn("chunk(s) of", rep.message)
        else:
            self.assertEqual(len(regions), 0, rep.message)
        return rep

    def test_mean_loss_in_chunks(self):
        rep = self.run_case(LMHead(), _inputs())
        # The [rows, vocab] tensors never exist whole.
        self.assertLess(rep.chunked_regions[0].chunk_workspace_bytes,
                        rep.chunked_regions[0].inner_bytes)
        self.assertIn("chunked: loss", str(rep))

    def test_ignore_index_and_sum(self):
        self.run_case(LMHead(), _inputs(ignored=100))
        self.run_case(LMHead(reduction="sum"), _inputs(ignored=7))

    def test_class_weights(self):
        weight = torch.rand(VOCAB, generator=torch.Generator().manual_seed(5)) + 0.5
        self.run_case(LMHead(weight=weight), _inputs(ignored=3))

    def test_bf16_autocast_logits_cast_to_float(self):
        model = LMHead(cast=True)

        class Autocast(nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, *args):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return self.inner(*args)

        self.run_case(Autocast(model), _inputs(), bf16=True)

    def test_stacked_steps_run_as_blocks(self):
        generator = torch.Generator().manual_seed(4)
        ids = torch.randint(0, VOCAB, (64, 8), generator=generator)
        labels = torch.randint(0, VOCAB, (64, 8), generator=generator)
        rep = self.run_case(StepwiseHead(), (ids, labels))
        region = rep.chunked_regions[0]
        self.assertEqual(region.rows, 512)
        # 8 steps of 64 rows: each step's projection (forward) and the
        # select, matmuls and sum of its gradient (backward) are its block's.
        self.assertEqual(region.block_rows, 64)
        self.assertEqual(sorted({b.first_row for b in region.block_ops}),
                         list(range(0, 512, 64)))
        self.assertEqual(region.chunk_rows % 64, 0)
        # The steps' weight and bias gradients are summed inside.
        self.assertTrue(region.summed_tensor_ids)
        # The [rows, vocab] logits are not an input: the projection is inside.
        self.assertLess(region.chunk_workspace_bytes, region.inner_bytes / 2)

    def test_torch_compile_backend_chunks_too(self):
        torch.manual_seed(0)
        model = LMHead()
        case = harness.Case(model, _inputs())
        eager = case.run(model)
        backend = echo_torch.backend(server=self.echod.address, max_overhead_ratio=1.0,
                                     on_error="raise")
        compiled = torch.compile(model, backend=backend)
        try:
            got = case.run(compiled)
        finally:
            torch._dynamo.reset()
        self.assertIsNone(backend.fallback_reason)
        self.assert_same_training(got, eager)
        rep = report(compiled)
        self.assertEqual(len(rep.chunked_regions), 1, rep.message)
        self.assert_peak_predicted(got.peak_bytes, rep.planned_peak_bytes, "backend")

    def test_inductor_chunks_too(self):
        # The forward step runs as one extern kernel (echo::chunked_forward),
        # the backward step as Inductor's multiplies; the rest is compiled.
        # Inductor's kernels reorder sums as chunks do: the fp32 tolerance.
        torch.manual_seed(0)
        model = LMHead()
        case = harness.Case(model, _inputs(ignored=5))
        eager = case.run(model)
        for wrapped in (
                optimize(model, server=self.echod.address, max_overhead_ratio=1.0,
                         compiler="inductor", plan_cache=False, on_error="raise"),
                torch.compile(model, backend=echo_torch.backend(
                    server=self.echod.address, max_overhead_ratio=1.0,
                    compiler="inductor", on_error="raise"))):
            try:
                got = case.run(wrapped)
            finally:
                torch._dynamo.reset()
            torch.testing.assert_close(got.loss, eager.loss, rtol=1e-5, atol=1e-6)
            for mine, want in zip(got.grads, eager.grads):
                torch.testing.assert_close(mine, want, rtol=1e-4, atol=1e-6)
            rep = report(wrapped)
            self.assertEqual(len(rep.chunked_regions), 1, rep.message)
            self.assertGreaterEqual(rep.chunked_regions[0].chunks, 2)

    def test_label_smoothing_is_left_alone_and_said(self):
        rep = self.run_case(LMHead(label_smoothing=0.1), _inputs(), expect_chunks=False)
        self.assertEqual(len(rep.chunking_notes), 1)
        self.assertIn("is not chunked", rep.chunking_notes[0])


if __name__ == "__main__":
    unittest.main()
