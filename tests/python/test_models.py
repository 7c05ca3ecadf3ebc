"""The model suite against the real echod.

Per model: echo_torch's plain partition and its plans give the eager loss and
gradients; the bytes the forward saves are what the plan says; the measured
peak of a training step is within 1% of echod's prediction for the exported
graph (EstimateMemory for the plain schedule, planned_peak_bytes for plans);
functorch's min-cut partition is measured the same way as the peer.

Skipped, with the reason printed, when build/bin/echod (or $ECHO_ECHOD) is
not built; plan checks are skipped while echod answers UNIMPLEMENTED.
"""
import sys
import unittest

import grpc
import torch

import harness
import models
import servers
from echo_torch import PlannerClient, PlanningError, optimize, proto, report

import peers

_pl = proto.planner_pb2
PEAK_TOLERANCE = 0.01
ECHOD = servers.echod_path()
SKIP_REASON = ("echod is not built (looked for $ECHO_ECHOD and build/bin/echod); "
               "build it to run the model suite")

try:
    import networkx  # noqa: F401  (functorch's min-cut needs it)
    HAVE_NETWORKX = True
except ImportError:
    HAVE_NETWORKX = False


def _log(line):
    print(line, file=sys.stderr, flush=True)


class EchodChecks(servers.SharedEchod):
    """The suite's checks of one training case (harness.Case) against a real
    echod, shared with test_third_party: a mixin for a unittest.TestCase."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.client = PlannerClient(cls.echod.address, timeout_seconds=120)
        cls.plans_unavailable = None
        try:
            cls.client.generate_recompute_plan(_pl.GenerateRecomputePlanRequest())
        except PlanningError as error:
            if error.code == grpc.StatusCode.UNIMPLEMENTED:
                cls.plans_unavailable = f"echod does not serve GenerateRecomputePlan: {error}"

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        super().tearDownClass()

    def assert_same_training(self, result, reference, exact=False):
        """Loss and gradients equal eager's: exactly, or within rtol 1e-4,
        atol 1e-6 (1e-5 and 1e-6 for the loss)."""
        if exact:
            self.assertEqual(result.loss.item(), reference.loss.item())
            self.assertEqual(harness.max_grad_diff(result, reference), 0.0)
            return
        torch.testing.assert_close(result.loss, reference.loss, rtol=1e-5, atol=1e-6)
        self.assertEqual([g is None for g in result.grads],
                         [g is None for g in reference.grads])
        for got, want in zip(result.grads, reference.grads):
            if want is not None:
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)

    def assert_peak_predicted(self, measured, predicted, what):
        error = measured / predicted - 1
        self.assertLess(abs(error), PEAK_TOLERANCE,
                        f"{what}: measured {measured:,} vs predicted {predicted:,} bytes")
        return error

    def check_plain(self, name, case, exact=True):
        """Eager, and AOTAutograd's plain partition run by echo_torch: the
        same training, the saved bytes the graph says, the peak echod's
        EstimateMemory predicts. Returns (eager, plain)."""
        eager = case.run(case.model)
        plain = case.run(harness.plain_module(case.model))
        self.assert_same_training(plain, eager, exact=exact)
        converted = plain.wrapped.converted
        self.assertEqual(plain.saved_bytes, converted.stash_candidate_bytes())
        estimate = harness.estimate(self.client, converted.graph)
        error = self.assert_peak_predicted(plain.peak_bytes, estimate.peak_bytes, f"{name} plain")
        _log(f"[{name}] {len(converted.graph.ops)} ops; eager peak {eager.peak_bytes:,} saved "
             f"{eager.saved_bytes:,}; plain measured peak {plain.peak_bytes:,} vs EstimateMemory "
             f"{estimate.peak_bytes:,} ({100 * error:+.2f}%)")
        return eager, plain

    def check_planned(self, what, planned, plain, eager):
        """A plan's step: eager's training, the saved bytes the plan says (no
        more than the plain partition's), the peak echod planned."""
        self.assert_same_training(planned, eager)
        rep = report(planned.wrapped)
        self.assertIsNotNone(rep.planned_peak_bytes)
        self.assertEqual(rep.stash_mismatch, [])
        self.assertEqual(planned.saved_bytes, rep.planned_saved_bytes)
        self.assertLessEqual(planned.saved_bytes, plain.saved_bytes)
        error = self.assert_peak_predicted(planned.peak_bytes, rep.planned_peak_bytes, what)
        _log(f"[{what}]: saved {plain.saved_bytes:,} -> {planned.saved_bytes:,};"
             f" measured peak {planned.peak_bytes:,} vs planned "
             f"{rep.planned_peak_bytes:,} ({100 * error:+.2f}%); "
             f"{rep.recompute_executions} recomputations, predicted overhead "
             f"{100 * rep.predicted_extra_compute_ratio:.2f}%")
        return rep


@unittest.skipIf(ECHOD is None, SKIP_REASON)
class ModelSuiteTest(EchodChecks, unittest.TestCase):
    def check_model(self, name):
        model = models.build(name)
        case = harness.Case(model, models.example_inputs(model))
        eager, plain = self.check_plain(name, case)

        if HAVE_NETWORKX:
            peer = case.run(peers.mincut_module(model))
            self.assert_same_training(peer, eager)
            _log(f"[{name}] min-cut peak {peer.peak_bytes:,} saved {peer.saved_bytes:,}")

        for policy in ("ECHO", "AUTO"):
            with self.subTest(policy=policy):
                if self.plans_unavailable:
                    _log(f"[{name}] {policy}: skipped: {self.plans_unavailable}")
                    self.skipTest(self.plans_unavailable)
                wrapped = optimize(model, server=self.echod.address, policy=policy,
                                   on_error="raise")
                self.check_planned(f"{name} {policy}", case.run(wrapped), plain, eager)

    def test_nmt(self):
        self.check_model("nmt")

    def test_deepspeech2(self):
        self.check_model("deepspeech2")

    def test_transformer(self):
        self.check_model("transformer")

    def test_resnet50(self):
        self.check_model("resnet50")

    def test_gpt(self):
        self.check_model("gpt")


class FakePlanSuiteTest(unittest.TestCase):
    """Every model under a plan that recomputes all cheap forward ops (from
    the fake planner in servers.py): runs without echod."""

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.server = servers.FakeServer().__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def check_model(self, name):
        model = models.build(name)
        inputs = models.example_inputs(model)
        eager = harness.eager(model, inputs)
        planned = harness.echo(model, inputs, self.server.address, "ECHO")
        EchodChecks.assert_same_training(self, planned, eager)
        rep = report(planned.wrapped)
        self.assertEqual(rep.stash_mismatch, [])
        self.assertEqual(planned.saved_bytes, rep.planned_saved_bytes)
        self.assertLess(planned.saved_bytes, eager.saved_bytes)
        self.assertGreater(rep.recompute_executions, 0)
        _log(f"[{name}] cheap-op plan: saved {eager.saved_bytes:,} -> {planned.saved_bytes:,}, "
             f"{rep.recompute_executions} recomputations, measured peak "
             f"{eager.peak_bytes:,} -> {planned.peak_bytes:,}")

    def test_nmt(self):
        self.check_model("nmt")

    def test_deepspeech2(self):
        self.check_model("deepspeech2")

    def test_transformer(self):
        self.check_model("transformer")

    def test_resnet50(self):
        self.check_model("resnet50")

    def test_gpt(self):
        self.check_model("gpt")


if __name__ == "__main__":
    unittest.main()
