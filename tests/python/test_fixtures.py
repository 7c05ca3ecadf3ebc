"""tests/data/graphs/*.pb are current: each parses, and matches a fresh
capture of its model (same ops, classes, edges, recompute_outputs, tensor
sizes and batch dimension). When torch or the converter changes, regenerate them with
export_graphs.py."""
import os
import unittest

import torch

import models
from echo_torch import capture_graph, proto
from export_graphs import OUT_DIR


def _load(name):
    with open(os.path.join(OUT_DIR, f"{name}.pb"), "rb") as f:
        return proto.graph_pb2.Graph.FromString(f.read())


def _shape(graph):
    return ([(op.id, op.op_type, op.op_class, op.phase, tuple(op.input_ids),
              tuple(op.output_ids), op.recomputable,
              op.attributes.get("recompute_outputs")) for op in graph.ops],
            [(t.id, t.size_bytes, t.role, t.is_output,
              t.batch_dim if t.HasField("batch_dim") else None) for t in graph.tensors],
            graph.batch_size)


class FixtureTest(unittest.TestCase):
    def test_fixtures_match_fresh_captures(self):
        torch.set_num_threads(2)
        for name in models.FIXTURE_NAMES:
            with self.subTest(model=name):
                stored = _load(name)
                self.assertEqual(stored.name, name)
                self.assertGreater(len(stored.ops), 100)
                model = models.build(name)
                fresh = capture_graph(model, *models.example_inputs(model)).graph
                stored_ops, stored_tensors, stored_batch = _shape(stored)
                fresh_ops, fresh_tensors, fresh_batch = _shape(fresh)
                self.assertEqual(stored_ops, fresh_ops)
                self.assertEqual(stored_tensors, fresh_tensors)
                self.assertEqual(stored_batch, fresh_batch)


if __name__ == "__main__":
    unittest.main()
