"""The batch dimension the hook marks (echo_torch/batch_dim.py): a graph
captured at one batch and rescaled to another must equal the graph captured
at that other batch, tensor by tensor, and echod's peak for the rescaled
graph must equal its peak for the captured one."""
import dataclasses
import unittest

import torch
import torch.nn as nn

import models
import servers
import echo_torch
from echo_torch import capture_graph, proto

_g = proto.graph_pb2
_pl = proto.planner_pb2
_dev = proto.device_pb2


class ConvBN(nn.Module):
    """conv -> batch norm -> relu -> linear, 8 channels: at batch 8 the
    batch norm's per-channel statistics have the batch's size."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 6 * 6, 5)

    def forward(self, x, y):
        h = torch.relu(self.bn(self.conv(x))).flatten(1)
        return nn.functional.cross_entropy(self.fc(h), y)


class Recurrent(nn.Module):
    """nn.GRU (batch-first) into a seq-first nn.LSTM: their initial states
    are zeros([layers, batch, hidden]), made inside the graph."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.gru = nn.GRU(16, 24, batch_first=True)
        self.lstm = nn.LSTM(24, 12, num_layers=2)
        self.out = nn.Linear(12, 50)

    def forward(self, tokens):
        h, _ = self.gru(self.emb(tokens))
        h, _ = self.lstm(h.transpose(0, 1))
        return self.out(h).square().mean()


class Attention(nn.Module):
    """nn.MultiheadAttention: its q/k/v projection is unflattened into a
    stack of 3 (select_backward re-inserts that axis), and the loss's
    gradient is expanded to [batch, seq, d]."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0].sum()


def _build(name, batch):
    torch.manual_seed(0)
    if name == "transformer":
        return models.TransformerEncoder(dataclasses.replace(models.TRANSFORMER_CI, batch=batch))
    if name == "gpt":
        return models.GPT(dataclasses.replace(models.GPT_CI, batch=batch))
    if name == "nmt":
        return models.NMT(dataclasses.replace(models.NMT_CI, batch=batch))
    raise ValueError(name)


def _capture(name, batch):
    if name == "convbn":
        torch.manual_seed(0)
        model = ConvBN()
        inputs = (torch.randn(batch, 3, 6, 6), torch.randint(0, 5, (batch,)))
    elif name == "recurrent":
        torch.manual_seed(0)
        model, inputs = Recurrent(), (torch.randint(0, 50, (batch, 7)),)
    elif name == "attention":
        torch.manual_seed(0)
        model, inputs = Attention(), (torch.randn(batch, 5, 32),)
    else:
        model = _build(name, batch)
        inputs = models.example_inputs(model)
    return capture_graph(model, *inputs).graph


def _graph_pb(graph):
    copy = _g.Graph()
    copy.CopyFrom(graph)
    return copy


def _rescaled(tensor, old_batch, new_batch):
    """(shape, size_bytes) of a tensor rescaled as graph.proto says."""
    shape = list(tensor.shape)
    if not tensor.HasField("batch_dim"):
        return shape, tensor.size_bytes
    shape[tensor.batch_dim] = shape[tensor.batch_dim] // old_batch * new_batch
    return shape, -(-tensor.size_bytes * new_batch // old_batch)


class BatchDimTest(unittest.TestCase):
    # (model, captured batch, rescaled to): batches that collide with other
    # axes (the Transformer's 4 heads, GPT's 512 = batch * seq = vocab, the
    # batch norm's 8 channels, q/k/v's stack of 3); the NMT is seq-first;
    # recurrent layers make their initial state (zeros) inside the graph.
    CASES = (("transformer", 4, 6), ("gpt", 8, 5), ("nmt", 3, 7), ("convbn", 8, 5),
             ("recurrent", 3, 7), ("attention", 3, 7))

    @classmethod
    def setUpClass(cls):
        cls.graphs = {}
        for name, small, big in cls.CASES:
            cls.graphs[name] = (_capture(name, small), _capture(name, big))

    def test_rescaled_graph_equals_the_graph_captured_at_that_batch(self):
        for name, small, big in self.CASES:
            g_small, g_big = self.graphs[name]
            self.assertEqual((g_small.batch_size, g_big.batch_size), (small, big))
            at_big = {t.id: t for t in g_big.tensors}
            self.assertEqual(set(at_big), {t.id for t in g_small.tensors})
            folded = 0
            for t in g_small.tensors:
                shape, size = _rescaled(t, small, big)
                with self.subTest(model=name, tensor=t.id):
                    self.assertEqual(shape, list(at_big[t.id].shape))
                    self.assertEqual(size, at_big[t.id].size_bytes)
                if t.HasField("batch_dim") and t.shape[t.batch_dim] != small:
                    folded += 1
            if name not in ("convbn", "recurrent"):
                # [batch*seq, d] activations and the like are marked.
                self.assertGreater(folded, 0, name)

    def test_parameters_and_their_gradients_are_not_marked(self):
        for name, _, _ in self.CASES:
            for t in self.graphs[name][0].tensors:
                if t.role in (_g.TENSOR_ROLE_PARAMETER, _g.TENSOR_ROLE_GRADIENT):
                    self.assertFalse(t.HasField("batch_dim"), f"{name} {t.id}")

    def test_seq_first_inputs_find_the_batch_on_their_second_axis(self):
        g_small, _ = self.graphs["nmt"]
        inputs = [t for t in g_small.tensors if t.role == _g.TENSOR_ROLE_INPUT
                  and len(t.shape) == 2 and t.shape[1] == 3]
        self.assertTrue(inputs)
        self.assertTrue(all(t.batch_dim == 1 for t in inputs))

    def test_echod_peak_of_the_rescaled_graph_is_the_captured_ones(self):
        # Without the per-op CPU workspace the capture measures: echod scales
        # workspace linearly, and a CPU convolution's backward scratch is not
        # (41,952 bytes at batch 8, 35,040 at 5).
        with servers.planner_client() as client:
            for name, small, big in self.CASES:
                g_small, g_big = (_graph_pb(g) for g in self.graphs[name])
                for g in (g_small, g_big):
                    for op in g.ops:
                        op.ClearField("workspace_bytes")
                request = _pl.FindMaxBatchSizeRequest(
                    graph=g_small, device=_dev.DeviceSpec(name="a100-80gb"),
                    max_overhead_ratio=0.0, min_batch_size=big, max_batch_size=big)
                scaled = client.find_max_batch_size(request)
                exact = client.estimate_memory(_pl.EstimateMemoryRequest(graph=g_big))
                self.assertTrue(scaled.without_recompute.found, name)
                self.assertEqual(scaled.without_recompute.peak_bytes, exact.peak_bytes, name)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                 nn.Linear(256, 4))

    def forward(self, x, y):
        return nn.functional.mse_loss(self.net(x), y)


def _mlp_inputs(batch):
    generator = torch.Generator().manual_seed(batch)
    return torch.randn(batch, 16, generator=generator), torch.randn(batch, 4, generator=generator)


class MaxBatchSizeTest(unittest.TestCase):
    """echo_torch.max_batch_size: captured at batch 4, answered by echod for
    a device of 600 KB; the answer is checked against graphs captured at the
    answer and one past it."""
    USABLE = 600_000

    def test_answer_fits_and_the_next_batch_does_not(self):
        torch.manual_seed(0)
        model = MLP()
        device = _dev.DeviceSpec(name="tiny-test-device", memory_bytes=self.USABLE,
                                 memory_bandwidth_bytes_per_second=1e12)
        device.peak_flops.add(dtype=_g.DTYPE_FLOAT32, flops_per_second=1e13)
        with servers.Echod() as echod:
            answer = echo_torch.max_batch_size(model, *_mlp_inputs(4), device=device,
                                               server=echod.address, reserved_bytes=0,
                                               max_overhead_ratio=0.2)
            self.assertEqual(answer.graph_batch_size, 4)
            self.assertEqual(answer.usable_bytes, self.USABLE)
            plain = answer.without_recompute
            self.assertTrue(plain.found)
            self.assertGreater(plain.batch_size, 4)
            self.assertGreaterEqual(answer.with_recompute.batch_size, plain.batch_size)
            with servers.planner_client(echod.address) as client:
                peaks = []
                for batch in (plain.batch_size, plain.batch_size + 1):
                    graph = _graph_pb(capture_graph(model, *_mlp_inputs(batch)).graph)
                    for op in graph.ops:
                        op.ClearField("workspace_bytes")
                    peaks.append(client.estimate_memory(
                        _pl.EstimateMemoryRequest(graph=graph)).peak_bytes)
        self.assertLessEqual(peaks[0], self.USABLE)
        self.assertGreater(peaks[1], self.USABLE)
        self.assertEqual(plain.peak_bytes, peaks[0])
        self.assertEqual(plain.next_batch_peak_bytes, peaks[1])

    def test_inputs_without_a_batch_are_refused(self):
        with self.assertRaisesRegex(ValueError, "no batch dimension"):
            echo_torch.max_batch_size(MLP(), *_mlp_inputs(1), device="h100-80gb",
                                      server="127.0.0.1:1")


if __name__ == "__main__":
    unittest.main()
