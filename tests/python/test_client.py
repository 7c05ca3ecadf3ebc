"""echo_torch.optimize against a fake MemoryPlanner over gRPC: requests,
plan application, addresses, and running unmodified when echod is away."""
import os
import tempfile
import unittest
import warnings

import grpc
import torch

import harness
import servers
from echo_torch import PlanningError, optimize, proto, report, resolve_address
from test_executor import Mlp

_pl = proto.planner_pb2


class FakeServerTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.model = Mlp(width=32, depth=2)
        self.inputs = (torch.randn(16, 32),)

    def test_plan_from_server_is_applied(self):
        with servers.FakeServer() as server:
            wrapped = optimize(self.model, server=server.address, policy="echo",
                               max_overhead_ratio=0.02, on_error="raise")
            eager = harness.eager(self.model, self.inputs)
            planned = harness.run_step(self.model, wrapped, self.inputs)
            (request,) = server.servicer.requests
        self.assertEqual(request.policy, _pl.RECOMPUTE_POLICY_ECHO)
        self.assertTrue(request.HasField("max_overhead_ratio"))
        self.assertAlmostEqual(request.max_overhead_ratio, 0.02)
        self.assertFalse(request.HasField("memory_limit_bytes"))
        self.assertEqual(request.allocator.rounding_bytes, 0)  # CPU model
        self.assertEqual(len(request.graph.ops), len(wrapped.converted.graph.ops))
        torch.testing.assert_close(planned.loss, eager.loss, rtol=0, atol=1e-7)
        self.assertLess(harness.max_grad_diff(planned, eager), 1e-6)
        rep = report(wrapped)
        self.assertEqual(rep.source, "echod:RECOMPUTE_POLICY_ECHO")
        self.assertEqual(rep.stash_mismatch, [])
        self.assertEqual(planned.saved_bytes, rep.planned_saved_bytes)
        self.assertEqual(planned.saved_bytes, 2 * 16 * 32 * 4)  # the two GEMM outputs
        self.assertIn("fake planner", str(rep))

    def test_memory_limit_is_sent(self):
        with servers.FakeServer() as server:
            wrapped = optimize(self.model, server=server.address, policy="AUTO",
                               memory_limit_bytes=123456, on_error="raise")
            wrapped(*self.inputs).backward()
            (request,) = server.servicer.requests
        self.assertEqual(request.memory_limit_bytes, 123456)
        self.assertFalse(request.HasField("max_overhead_ratio"))
        with self.assertRaises(ValueError):
            optimize(self.model, memory_limit_bytes=1, max_overhead_ratio=0.1)
        with self.assertRaisesRegex(ValueError, "unknown policy"):
            optimize(self.model, policy="FASTEST")

    def test_unix_socket_and_env(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "echod.sock")
            with servers.FakeServer(unix_path=path) as server:
                old = os.environ.get("ECHO_SERVER")
                os.environ["ECHO_SERVER"] = path  # a bare path means a Unix socket
                try:
                    self.assertEqual(resolve_address(), "unix://" + path)
                    wrapped = optimize(self.model, on_error="raise")
                    wrapped(*self.inputs).backward()
                finally:
                    if old is None:
                        del os.environ["ECHO_SERVER"]
                    else:
                        os.environ["ECHO_SERVER"] = old
                self.assertEqual(len(server.servicer.requests), 1)
        self.assertEqual(resolve_address("10.0.0.1:1"), "10.0.0.1:1")

    def test_unreachable_server_runs_unmodified_and_warns_once(self):
        address = f"127.0.0.1:{servers.free_port()}"  # nobody listens
        wrapped = optimize(self.model, server=address, timeout_seconds=0.5)
        eager = harness.eager(self.model, self.inputs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = harness.run_step(self.model, wrapped, self.inputs)
            wrapped(*self.inputs).backward()
        echo_warnings = [w for w in caught if "echo_torch" in str(w.message)]
        self.assertEqual(len(echo_warnings), 1, [str(w.message) for w in echo_warnings])
        self.assertIn("not reachable", str(echo_warnings[0].message))
        self.assertIsNotNone(wrapped.fallback_reason)
        # The report says the last step ran unplanned, and why.
        self.assertFalse(report(wrapped).planned)
        self.assertIn("not reachable", report(wrapped).unplanned_reason)
        self.assertEqual(result.loss.item(), eager.loss.item())
        self.assertEqual(result.saved_bytes, eager.saved_bytes)

    def test_server_error_falls_back_or_raises(self):
        error = (grpc.StatusCode.INVALID_ARGUMENT, "op 'x' reads unknown tensor")
        with servers.FakeServer(error=error) as server:
            strict = optimize(self.model, server=server.address, on_error="raise")
            with self.assertRaises(PlanningError) as raised:
                strict(*self.inputs)
            # One line naming the server, the method, the code and the reason.
            message = str(raised.exception)
            self.assertNotIn("\n", message)
            self.assertRegex(message, r"echod at 127\.0\.0\.1:\d+ refused GenerateRecomputePlan: "
                                      r"INVALID_ARGUMENT: op 'x' reads unknown tensor")
            lenient = optimize(self.model, server=server.address)
            with self.assertWarnsRegex(RuntimeWarning, "unknown tensor"):
                lenient(*self.inputs).backward()
        self.assertIn("planning failed", lenient.fallback_reason)


if __name__ == "__main__":
    unittest.main()
