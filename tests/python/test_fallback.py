"""A client that falls back only where it must (issue 49).

Fallback belongs to the input signature that failed, not to the model:
with echod stopped, a new shape runs unmodified while a shape planned
before keeps running its plan (its measured step peak stays below
eager's); once echod is back, a new shape is planned, and the failed one
is planned again at its next step after the retry delay. The warning says
what happened (echod unreachable, or echod died during the request), and
`report()` describes the step that last ran: its plan, or that it ran
unplanned and why.

Skipped, with the reason, when echod is not built.
"""
import time
import unittest
import warnings

import torch

import harness
import servers
from echo_torch import api, optimize, report
from test_chunked import LMHead, VOCAB
from test_models import ECHOD, SKIP_REASON


def _inputs(length):
    generator = torch.Generator().manual_seed(length)
    ids = torch.randint(0, VOCAB, (4, length), generator=generator)
    labels = torch.randint(0, VOCAB, (4, length), generator=generator)
    return ids, labels


def _echo_warnings(caught):
    return [str(w.message) for w in caught if "echo_torch" in str(w.message)]


@unittest.skipIf(ECHOD is None, SKIP_REASON)
class FallbackTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        torch.set_num_threads(2)
        self.model = LMHead()
        # Retries due at once in the test: the delay is asserted by name.
        self.retry = api.EchoModule.RETRY_SECONDS
        api.EchoModule.RETRY_SECONDS = 0.0

    def tearDown(self):
        api.EchoModule.RETRY_SECONDS = self.retry

    def test_planned_shapes_keep_their_plans_while_echod_is_away(self):
        a, b, c = _inputs(128), _inputs(96), _inputs(64)
        eager_a = harness.Case(self.model, a).run(self.model)
        with servers.Echod() as first:
            port = first.port
            wrapped = optimize(self.model, server=first.address, max_overhead_ratio=1.0,
                               plan_cache=False, timeout_seconds=10)
            wrapped(*a).backward()
            planned_a = report(wrapped)
            self.assertTrue(planned_a.planned)
            self.assertGreaterEqual(len(planned_a.chunked_regions), 1)
        # echod stopped: a new shape falls back, naming why.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            wrapped(*b).backward()
        said = _echo_warnings(caught)
        self.assertEqual(len(said), 1, said)
        self.assertIn("echod unreachable", said[0])
        self.assertIn("this input signature runs unmodified", said[0])
        self.assertFalse(report(wrapped).planned)
        self.assertIn("echod unreachable", report(wrapped).unplanned_reason)
        self.assertIn("ran unplanned", str(report(wrapped)))
        # Shape A still runs its plan: eager's training at a lower peak.
        planned = harness.Case(self.model, a).run(wrapped)
        self.assertIs(report(wrapped), planned_a)
        self.assertIsNone(wrapped.fallback_reason)
        torch.testing.assert_close(planned.loss, eager_a.loss, rtol=1e-5, atol=1e-6)
        for got, want in zip(planned.grads, eager_a.grads):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
        self.assertLess(planned.peak_bytes, eager_a.peak_bytes)
        # echod back on the same address: a new shape is planned, and the
        # shape that fell back is planned again.
        with servers.Echod(port=port):
            # The client's channel tries to reconnect at most a second
            # apart (client.py): a step before that would fall back again.
            time.sleep(1.2)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                wrapped(*c).backward()
                self.assertTrue(report(wrapped).planned)
                wrapped(*b).backward()
                self.assertTrue(report(wrapped).planned)
            self.assertEqual(_echo_warnings(caught), [])
            self.assertEqual(len(wrapped.reports()), 3)

    def test_a_failed_shape_waits_for_its_retry_delay(self):
        api.EchoModule.RETRY_SECONDS = 3600.0
        address = f"127.0.0.1:{servers.free_port()}"  # nobody listens yet
        wrapped = optimize(self.model, server=address, plan_cache=False, timeout_seconds=5)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            wrapped(*_inputs(64)).backward()
        port = int(address.rsplit(":", 1)[1])
        with servers.Echod(port=port):
            # Not yet due: the failed shape runs unmodified, no new request.
            wrapped(*_inputs(64)).backward()
            self.assertFalse(report(wrapped).planned)
            # Another shape is not held back by it.
            wrapped(*_inputs(32)).backward()
            self.assertTrue(report(wrapped).planned)

    def test_echod_dying_during_the_request_is_said(self):
        with servers.DyingServer() as dying:
            wrapped = optimize(self.model, server=dying.address, plan_cache=False,
                               timeout_seconds=10)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                loss = wrapped(*_inputs(64))
                loss.backward()
        said = _echo_warnings(caught)
        self.assertEqual(len(said), 1, said)
        self.assertIn("echod died during the request", said[0])
        self.assertNotIn("start echod", said[0])
        self.assertIn("died during the request", report(wrapped).unplanned_reason)
        torch.testing.assert_close(loss, self.model(*_inputs(64)))


if __name__ == "__main__":
    unittest.main()
