"""Joint graph -> echo.v1.Graph: ids, sizes, views, phases, roles."""
import unittest

import torch
import torch.nn as nn

from echo_torch import capture_graph, proto

_g = proto.graph_pb2


class TwoLayer(nn.Module):
    """linear -> layer norm -> dropout -> tanh -> linear -> loss."""

    def __init__(self, dropout=0.5):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.ln = nn.LayerNorm(16)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.drop(self.ln(self.fc1(x))))).square().mean()


def _by_id(items):
    return {item.id: item for item in items}


class ConvertTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.model = TwoLayer()
        cls.converted = capture_graph(cls.model, torch.randn(3, 8))
        cls.graph = cls.converted.graph
        cls.ops = _by_id(cls.graph.ops)
        cls.tensors = _by_id(cls.graph.tensors)

    def test_parameters_inputs_tangents(self):
        params = [t for t in self.graph.tensors if t.role == _g.TENSOR_ROLE_PARAMETER]
        self.assertEqual([t.name for t in params],
                         ["fc1.weight", "fc1.bias", "ln.weight", "ln.bias",
                          "fc2.weight", "fc2.bias"])
        self.assertEqual(params[0].size_bytes, 16 * 8 * 4)
        self.assertEqual(list(params[0].shape), [16, 8])
        self.assertEqual(params[0].dtype, _g.DTYPE_FLOAT32)
        batch = self.tensors["primals_7"]
        self.assertEqual((batch.role, batch.name, batch.size_bytes),
                         (_g.TENSOR_ROLE_INPUT, "input_0", 3 * 8 * 4))
        self.assertTrue(batch.is_output)  # the caller holds it through the step
        tangent = self.tensors["tangents_1"]
        self.assertEqual(tangent.role, _g.TENSOR_ROLE_INPUT)
        self.assertTrue(tangent.is_output)  # held through the backward

    def test_gradients_are_outputs(self):
        grads = [t for t in self.graph.tensors if t.role == _g.TENSOR_ROLE_GRADIENT]
        self.assertTrue(all(t.is_output for t in grads))
        # Six parameter gradients; some are views of a gradient buffer (both
        # marked), none is of the batch (no grad).
        owners = [t for t in grads if t.size_bytes > 0]
        self.assertEqual(sorted(t.size_bytes for t in owners),
                         sorted([16 * 8 * 4, 16 * 4, 16 * 4, 16 * 4, 4 * 16 * 4, 4 * 4]))
        loss = [t for t in self.graph.tensors
                if t.is_output and t.role == _g.TENSOR_ROLE_ACTIVATION]
        self.assertEqual([list(t.shape) for t in loss], [[]])

    def test_phases_split_once(self):
        phases = [op.phase for op in self.graph.ops]
        first_bwd = phases.index(_g.PHASE_BACKWARD)
        self.assertTrue(all(p == _g.PHASE_FORWARD for p in phases[:first_bwd]))
        self.assertTrue(all(p == _g.PHASE_BACKWARD for p in phases[first_bwd:]))
        self.assertEqual(first_bwd, self.converted.first_backward_op)
        # The last forward op produces the loss.
        self.assertEqual(self.graph.ops[first_bwd - 1].op_type, "aten::mean")

    def test_views_are_free_and_keep_their_base_alive(self):
        t = self.ops["t"]  # fc1.weight transposed
        self.assertEqual(t.op_type, "aten::t")
        self.assertEqual(t.op_class, _g.OP_CLASS_DATA_MOVEMENT)
        self.assertEqual(self.tensors["t"].size_bytes, 0)
        addmm = self.ops["addmm"]
        # Real inputs in argument order, then the view's storage base.
        self.assertEqual(list(addmm.input_ids), ["primals_2", "primals_7", "t", "primals_1"])
        # A chain of views resolves to the owner: detach(detach(tanh)).
        readers_of_tanh = [op.id for op in self.graph.ops if "tanh" in op.input_ids]
        self.assertIn("tanh_backward", readers_of_tanh)

    def test_gemm_flops_and_classes(self):
        addmm = self.ops["addmm"]
        self.assertEqual(addmm.op_class, _g.OP_CLASS_GEMM)
        self.assertEqual(addmm.flops, 2 * 3 * 16 * 8 + 3 * 16)
        self.assertEqual(self.ops["native_layer_norm"].op_class, _g.OP_CLASS_NORM)
        self.assertEqual(self.ops["tanh"].op_class, _g.OP_CLASS_ELEMENTWISE)
        self.assertEqual(self.ops["native_layer_norm_backward"].phase, _g.PHASE_BACKWARD)

    def test_multi_output_op(self):
        ln = self.ops["native_layer_norm"]
        self.assertEqual(list(ln.output_ids), ["native_layer_norm:0", "native_layer_norm:1",
                                                 "native_layer_norm:2"])
        self.assertEqual([self.tensors[t].size_bytes for t in ln.output_ids], [3 * 16 * 4, 12, 12])

    def test_dropout_reads_its_random_state_once_and_may_replay_the_draw(self):
        # The only random op is the read of the generator's state (never re-run);
        # the draw from it may be (dropout.py).
        random = [op for op in self.graph.ops if op.op_class == _g.OP_CLASS_RANDOM]
        self.assertEqual([op.op_type for op in random], ["echo::rng_state"])
        self.assertFalse(random[0].recomputable)
        self.assertEqual([self.tensors[t].size_bytes for t in random[0].output_ids], [5056])
        (draw,) = [op for op in self.graph.ops if op.op_type == "echo::dropout_draw"]
        self.assertTrue(draw.recomputable)
        self.assertEqual(draw.attributes["recompute_outputs"], "2")
        self.assertIn(random[0].output_ids[0], draw.input_ids)
        # It returns the scaled output and a bool mask.
        self.assertEqual([self.tensors[t].size_bytes for t in draw.output_ids],
                         [3 * 16 * 4, 3 * 16])
        self.assertTrue(all(op.recomputable for op in self.graph.ops
                            if op.op_class != _g.OP_CLASS_RANDOM))

    def test_stash_candidates(self):
        # addmm (layer-norm input), mean and rstd, the dropout mask (bool),
        # tanh out, and fc2's output (square's backward reads it).
        self.assertEqual(self.converted.stash_candidate_bytes(),
                         3 * 16 * 4 + 12 + 12 + 3 * 16 + 3 * 16 * 4 + 3 * 4 * 4)


class BatchNormConvertTest(unittest.TestCase):
    def test_batch_norm_may_be_recomputed_without_touching_stats(self):
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        before = model[1].running_mean.clone()
        converted = capture_graph(model, torch.randn(2, 3, 8, 8))
        torch.testing.assert_close(model[1].running_mean, before)  # left as it was
        ops = _by_id(converted.graph.ops)
        # AOTAutograd's functional batch norm returns the new statistics.
        self.assertTrue(ops["_native_batch_norm_legit_functional"].recomputable)
        self.assertEqual(ops["convolution"].op_class, _g.OP_CLASS_CONV)
        # 2 * out elements * (C_in * kh * kw) for a [2, 4, 6, 6] output.
        self.assertEqual(ops["convolution"].flops, 2 * (2 * 4 * 6 * 6) * (3 * 3 * 3))
        # First layer: no input gradient, so one pass of the backward.
        self.assertEqual(ops["convolution_backward"].flops, 2 * (2 * 4 * 6 * 6) * (3 * 3 * 3))
        roles = {t.name: t.role for t in converted.graph.tensors}
        self.assertEqual(roles["1.running_mean"], _g.TENSOR_ROLE_PARAMETER)


class OpProfileTest(unittest.TestCase):
    def test_workspace_is_measured_at_capture_and_times_only_on_request(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(1, 4, 11, padding=5), nn.Tanh(), nn.Conv2d(4, 4, 11))
        x = torch.randn(2, 1, 24, 24)
        from echo_torch import optimize
        from echo_torch.planners import PlainPlanner
        profiled = optimize(model, planner=PlainPlanner(), on_error="raise")
        profiled(x).sum().backward()
        ops = _by_id(profiled.converted.graph.ops)
        # The CPU convolution backward allocates unfolding buffers (im2col)
        # besides its outputs; their size depends on the kernel path.
        conv_bwd = [op for op in ops.values() if op.op_type == "aten::convolution_backward"]
        self.assertEqual(len(conv_bwd), 2)
        for op in conv_bwd:
            self.assertGreater(op.workspace_bytes, 0)
            self.assertLess(op.workspace_bytes, 4 * 121 * 24 * 24 * 2 * 4)
        self.assertEqual(ops["tanh"].workspace_bytes, 0)
        # Times come from echod's cost model unless the user asks.
        self.assertFalse(any(op.HasField("measured_time_seconds") for op in ops.values()))
        timed = optimize(model, planner=PlainPlanner(), on_error="raise", client_timing=True)
        timed(x).sum().backward()
        self.assertTrue(all(op.HasField("measured_time_seconds") and
                            op.measured_on.startswith("cpu:")
                            for op in timed.converted.graph.ops))
        plain = optimize(model, planner=PlainPlanner(), on_error="raise",
                         measure_workspace=False)
        plain(x).sum().backward()
        self.assertTrue(all(op.workspace_bytes == 0 and not op.HasField("measured_time_seconds")
                            for op in plain.converted.graph.ops))

    def test_client_times_name_the_catalog_device_only_when_taken_on_it(self):
        # echod prices with a time only when measured_on names the device
        # it prices on: times taken on the GPU a catalog entry stands for
        # carry its name; times taken elsewhere keep where, and say so.
        from unittest import mock
        from echo_torch import pipeline
        from echo_torch.planners import PlainPlanner, PlanRequestOptions
        joint = None  # _device_description is replaced below

        class Asking:
            def __init__(self, device):
                self.options = PlanRequestOptions(device=device)

        def label(taken, gpu, device):
            with mock.patch.object(pipeline, "_device_description", return_value=taken), \
                    mock.patch.object(pipeline, "gpu_catalog_name", return_value=gpu):
                return pipeline._timing_label(joint, Asking(device))

        self.assertEqual(label("cuda:NVIDIA H200", "h200", "h200"), "h200")
        with self.assertLogs("echo_torch", level="WARNING") as logged:
            self.assertEqual(label("cuda:NVIDIA H200", "h200", "a100-80gb"), "cuda:NVIDIA H200")
            self.assertEqual(label("cpu:x86_64", None, "h100-80gb"), "cpu:x86_64")
        self.assertIn("do not price a100-80gb", logged.output[0])
        self.assertIn("do not price h100-80gb", logged.output[1])
        # No device asked for: the capture machine's times are all there is.
        with mock.patch.object(pipeline, "_device_description", return_value="cpu:x86_64"):
            self.assertEqual(pipeline._timing_label(joint, PlainPlanner()), "cpu:x86_64")


if __name__ == "__main__":
    unittest.main()

