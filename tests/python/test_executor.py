"""Plans applied to real modules: results, saved set, recompute placement."""
import unittest
import weakref

import torch
import torch.nn as nn

import harness
import servers
from echo_torch import capture_graph, optimize, report

import measure
from echo_torch.executor import build_programs
from echo_torch.programs import PlanError, Program, _Instr, _Slot
from echo_torch.planners import (PlainPlanner, StashSetPlanner, plain_schedule,
                                 schedule_from_stash, stash_of_schedule)
from test_convert import TwoLayer


class Mlp(nn.Module):
    """Three blocks of linear -> gelu -> mul by sigmoid: lots of cheap ops
    whose outputs the backward reads."""

    def __init__(self, width=64, depth=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            h = layer(x)
            x = torch.nn.functional.gelu(h) * torch.sigmoid(h)
        return x.square().mean()


def _heavy_stash(graph):
    return servers.cheap_ops_plan(graph).stash_tensor_ids


class PlanApplicationTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.model = Mlp()
        self.inputs = (torch.randn(32, 64),)

    def test_plain_plan_saves_what_autograd_saves(self):
        eager = harness.eager(self.model, self.inputs)
        plain = harness.aot_plain(self.model, self.inputs)
        self.assertEqual(plain.loss.item(), eager.loss.item())
        self.assertEqual(harness.max_grad_diff(plain, eager), 0.0)
        self.assertEqual(plain.saved_bytes, eager.saved_bytes)
        self.assertEqual(plain.saved_bytes, plain.wrapped.converted.stash_candidate_bytes())

    def test_recompute_plan_matches_eager_and_saves_less(self):
        graph = capture_graph(self.model, *self.inputs).graph
        stash = _heavy_stash(graph)
        wrapped = optimize(self.model, planner=StashSetPlanner(stash), on_error="raise")
        eager = harness.eager(self.model, self.inputs)
        planned = harness.run_step(self.model, wrapped, self.inputs)
        torch.testing.assert_close(planned.loss, eager.loss, rtol=0, atol=1e-7)
        self.assertLess(harness.max_grad_diff(planned, eager), 1e-6)
        rep = report(wrapped)
        # The forward saves exactly the planned stash set: the three GEMM
        # outputs (gelu and sigmoid recomputed from them), [32, 64] floats each.
        self.assertEqual(sorted(wrapped.programs.saved_activation_ids), ["addmm", "addmm_1",
                                                                         "addmm_2"])
        self.assertEqual(planned.saved_bytes, 3 * 32 * 64 * 4)
        self.assertEqual(planned.saved_bytes, rep.planned_saved_bytes)
        self.assertLess(rep.planned_saved_bytes, rep.default_saved_bytes)
        self.assertEqual(rep.stash_mismatch, [])
        self.assertGreater(rep.recompute_executions, 0)

    def test_recomputations_run_right_before_first_use(self):
        converted = capture_graph(self.model, *self.inputs)
        graph = converted.graph
        schedule = schedule_from_stash(graph, _heavy_stash(graph))
        programs = build_programs(converted, schedule)
        # The backward program runs the schedule's backward part in order
        # (views are derived on first read, so they are skipped here).
        split = schedule.index((converted.first_backward_op, False))
        expected = [graph.ops[i].op_type for i, _ in schedule[split:]
                    if not converted.ops[i].is_view]
        ran = [f"aten::{t._schema.name.split('::')[1]}" for t in
               (instr.target for instr in programs.backward.instrs)
               if hasattr(t, "_schema") and not _is_view_target(t)]
        self.assertEqual(ran, expected)
        # Recomputations are spread over the backward, not bunched at its
        # start: the last layer's recompute comes first, the first layer's
        # after the last layer's gradient GEMMs.
        positions = [k for k, (i, rec) in enumerate(schedule[split:]) if rec]
        originals = [k for k, (i, rec) in enumerate(schedule[split:]) if not rec]
        self.assertLess(min(originals), max(positions))
        # The schedule's stash (by replay) is what the forward program saves.
        self.assertEqual(sorted(stash_of_schedule(graph, schedule)),
                         sorted(programs.saved_activation_ids))

    def test_recompute_between_forward_and_backward_belongs_to_the_backward(self):
        converted = capture_graph(self.model, *self.inputs)
        graph = converted.graph
        stash = _heavy_stash(graph)
        schedule = schedule_from_stash(graph, stash)
        split = schedule.index((converted.first_backward_op, False))
        # Move the backward's first recomputation to just before the first
        # backward op, where a planner may put it.
        first = next(k for k in range(split, len(schedule)) if schedule[k][1])
        moved = schedule[:split] + [schedule[first]] + schedule[split:first] + \
            schedule[first + 1:]
        programs = build_programs(converted, moved)
        self.assertEqual(programs.recompute_count, sum(rec for _, rec in schedule))
        recomputed = graph.ops[schedule[first][0]]
        self.assertNotIn(recomputed.output_ids[0], programs.saved_activation_ids)
        self.assertEqual(sorted(programs.saved_activation_ids),
                         sorted(build_programs(converted, schedule).saved_activation_ids))

    def test_invalid_schedules_are_rejected(self):
        converted = capture_graph(self.model, *self.inputs)
        plain = plain_schedule(converted.graph)
        with self.assertRaisesRegex(PlanError, "out of graph order"):
            build_programs(converted, [plain[1], plain[0]] + plain[2:])
        with self.assertRaisesRegex(PlanError, "recomputed before it ran"):
            build_programs(converted, [(3, True)] + plain)
        with self.assertRaisesRegex(PlanError, "schedule ends before"):
            build_programs(converted, plain[:-1])

    def test_dropout_recomputes_with_its_random_state_replayed(self):
        torch.manual_seed(0)
        model = TwoLayer(dropout=0.5)
        inputs = (torch.randn(16, 8),)
        # Ask for nothing to be stashed: only the generator state is kept.
        wrapped = optimize(model, planner=StashSetPlanner([]), on_error="raise")
        eager = harness.eager(model, inputs, seed=3)
        eager_after = torch.get_rng_state()
        planned = harness.run_step(model, wrapped, inputs, seed=3)
        self.assertEqual(planned.loss.item(), eager.loss.item())
        # The mask and the output are the first run's bit for bit ...
        self.assertEqual(harness.max_grad_diff(planned, eager), 0.0)
        # ... and the replay leaves the generator where eager left it.
        self.assertTrue(torch.equal(torch.get_rng_state(), eager_after))
        # Neither the mask nor the output is held: the state (5056 bytes on
        # the CPU) is, and the backward replays the draw.
        graph = wrapped.converted.graph
        (state,) = [op for op in graph.ops if op.op_type == "echo::rng_state"]
        self.assertFalse(state.recomputable)
        self.assertEqual(sorted(wrapped.programs.saved_activation_ids), list(state.output_ids))
        (draw,) = [op for op in graph.ops if op.op_type == "echo::dropout_draw"]
        self.assertTrue(draw.recomputable)
        self.assertEqual(draw.attributes["recompute_outputs"], "2")
        targets = [i.target for i in wrapped.programs.backward.instrs]
        self.assertIn(torch.ops.echo.dropout_replay.default, targets)
        # The output can still be made from a held mask instead (a cheaper
        # recomputation): its first run is no work, and echod is told so.
        (made,) = [op for op in graph.ops if op.op_type == "echo::dropout_output"]
        self.assertEqual(made.attributes["first_run_alias"], draw.output_ids[0])
        self.assertGreater(report(wrapped).recompute_executions, 0)

    def test_models_with_dropout_recompute_it_and_match_eager(self):
        # The suite's Transformer and GPT (dropout 0.1 everywhere), every
        # recomputable op recomputed: gradients equal eager's, the random
        # stream ends where eager's does.
        import models
        for name in ("transformer", "gpt"):
            with self.subTest(model=name):
                model = models.build(name)
                inputs = models.example_inputs(model)
                wrapped = optimize(model, planner=StashSetPlanner([]), on_error="raise")
                eager = harness.eager(model, inputs, seed=5)
                eager_after = torch.get_rng_state()
                planned = harness.run_step(model, wrapped, inputs, seed=5)
                self.assertTrue(torch.equal(torch.get_rng_state(), eager_after))
                self.assertEqual(planned.loss.item(), eager.loss.item())
                self.assertLessEqual(harness.max_grad_diff(planned, eager), 1e-6)
                replays = sum(i.target == torch.ops.echo.dropout_replay.default
                              for i in wrapped.programs.backward.instrs)
                draws = sum(op.op_type == "echo::dropout_draw"
                            for op in wrapped.converted.graph.ops)
                self.assertGreater(draws, 0)
                self.assertEqual(replays, draws)

    def test_dropout_replay_draws_what_native_dropout_drew(self):
        from echo_torch import dropout  # noqa: F401  (registers the echo ops)
        generator = torch.Generator().manual_seed(7)
        for dtype in (torch.float32, torch.bfloat16, torch.float64):
            x = torch.randn(64, 33, generator=generator).to(dtype)
            for p in (0.1, 0.5, 0.9):
                torch.manual_seed(1)
                state = torch.ops.echo.rng_state(x)
                out, mask = torch.ops.echo.dropout_draw(x, p, state)
                after = torch.get_rng_state()
                torch.manual_seed(1)
                eager_out, eager_mask = torch.ops.aten.native_dropout(x, p, True)
                self.assertTrue(torch.equal(out, eager_out) and torch.equal(mask, eager_mask))
                torch.manual_seed(99)
                before = torch.get_rng_state()
                again, again_mask = torch.ops.echo.dropout_replay(x, p, state)
                self.assertTrue(torch.equal(out, again), f"{dtype} p={p}")
                self.assertTrue(torch.equal(mask, again_mask))
                self.assertTrue(torch.equal(torch.get_rng_state(), before))
                self.assertFalse(torch.equal(after, before))

    def test_dropout_output_recomputes_as_native_dropout_makes_it(self):
        import echo_torch.dropout  # noqa: F401  (registers echo::dropout_output)
        generator = torch.Generator().manual_seed(7)
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            x = torch.randn(64, 33, generator=generator).to(dtype)
            for p in (0.1, 0.5, 0.9):
                torch.manual_seed(1)
                out, mask = torch.ops.aten.native_dropout(x, p, True)
                again = torch.ops.echo.dropout_output(x, mask, 1.0 / (1.0 - p))
                self.assertTrue(torch.equal(out, again), f"{dtype} p={p}")


def _is_view_target(target):
    from echo_torch import ops
    views, written = ops.aliasing(target)
    return bool(views) and all(views) and not written


class BatchNormTest(unittest.TestCase):
    def test_running_stats_follow_eager_with_recomputed_batch_norm(self):
        torch.manual_seed(0)
        make = lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),  # noqa
                                     nn.Conv2d(8, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                                     nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
        ref, model = make(), make()
        model.load_state_dict(ref.state_dict())
        x = torch.randn(4, 3, 8, 8)
        graph = capture_graph(model, x).graph
        # Stash only convolution outputs: batch norms and relus recompute.
        stash = [t for op in graph.ops if op.op_type == "aten::convolution"
                 for t in op.output_ids]
        wrapped = optimize(model, planner=StashSetPlanner(stash), on_error="raise")
        for _ in range(2):
            ref(x).sum().backward()
            wrapped(x).sum().backward()
        recomputed = report(wrapped).recomputed_op_types
        self.assertEqual(recomputed.get("aten::_native_batch_norm_legit_functional"), 2)
        for (name, a), b in zip(ref.state_dict().items(), model.state_dict().values()):
            torch.testing.assert_close(b, a, msg=name)
        for a, b in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(b.grad, a.grad)


class SignatureTest(unittest.TestCase):
    def test_new_shapes_are_captured_again_and_no_grad_runs_eagerly(self):
        torch.manual_seed(0)
        model = Mlp(width=16, depth=1)
        wrapped = optimize(model, planner=PlainPlanner(), on_error="raise")
        for batch in (4, 7, 4):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(wrapped(x), model(x))
        self.assertEqual(len(wrapped.reports()), 2)
        with torch.no_grad():
            self.assertEqual(wrapped(torch.randn(5, 16)).shape, ())
        self.assertEqual(len(wrapped.reports()), 2)

    def test_measured_saved_bytes_ignore_parameters(self):
        model = nn.Linear(8, 8)
        x = torch.randn(2, 8)
        saved, _ = measure.measure_saved(lambda: model(x).sum(), [model.weight, model.bias, x])
        self.assertEqual(saved, 0)  # addmm saves only its inputs


class ProgramTest(unittest.TestCase):
    def test_an_op_output_dies_at_its_last_reader(self):
        """unbind's outputs (views that keep their base's storage) are gone
        once their last reader ran, not held until the next multi-output op:
        the plan's memory count frees them there."""
        held = []

        def add(a, b):
            held.extend([weakref.ref(a), weakref.ref(b)])
            return a + b

        alive = []

        def probe(x):
            alive.extend(ref() is not None for ref in held)
            return x * 2

        program = Program("p", [0], [
            _Instr(torch.ops.aten.mul.Tensor, (_Slot(0), 2.0), {}, 1),
            _Instr(torch.ops.aten.unbind.int, (_Slot(1),), {}, [2, 3]),
            _Instr(add, (_Slot(2), _Slot(3)), {}, 4),
            _Instr(probe, (_Slot(4),), {}, 5),
        ], [5])
        out, = program([torch.ones(2, 3)])
        self.assertEqual(out.tolist(), [8.0] * 3)
        self.assertEqual(alive, [False, False])

    def test_a_gradient_handed_over_early_makes_its_view_there(self):
        """update_in_backward.py: a gradient returned as a view of a matmul
        goes to the update right after the matmul's last reader; the view
        is made there, not at the end, and the matmul's storage dies with
        the hand-over, before the program's last op."""
        handed, alive, made = [], [], []

        def mm(a, b):
            made.append(weakref.ref(out := a @ b))
            return out

        def probe(x):
            alive.append((len(handed), made[0]() is not None))
            return x * 2

        program = Program("p", [0], [
            _Instr(mm, (_Slot(0), _Slot(0)), {}, 1),
            _Instr(torch.ops.aten.sum.default, (_Slot(1),), {}, 2),
            _Instr(probe, (_Slot(2),), {}, 3),
            _Instr(torch.ops.aten.t.default, (_Slot(1),), {}, 4),
        ], [4, 3])
        x = torch.arange(4.0).reshape(2, 2)
        product = x @ x
        out = program.run([x], {1: [(0, [3])]},
                          lambda position, value: handed.append((position, value.clone())))
        self.assertEqual(len(handed), 1)
        self.assertEqual(handed[0][0], 0)
        torch.testing.assert_close(handed[0][1], product.t())
        # Handed over before the op after sum, and the matmul is gone then.
        self.assertEqual(alive, [(1, False)])
        self.assertIsNone(out[0])
        torch.testing.assert_close(out[1], product.sum() * 2)
        # Without updates, the same program returns the view at the end.
        plain = program([x])
        torch.testing.assert_close(plain[0], product.t())


if __name__ == "__main__":
    unittest.main()
