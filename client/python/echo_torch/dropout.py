"""Training dropout, split so that a plan may recompute its output.

aten::native_dropout(x, p, train=True) draws the mask from the random
generator and makes the output from it. The hook marks random ops as never
re-run (a second run would draw other numbers), so every dropout output the
backward reads had to be held. The capture splits each training dropout:
native_dropout still runs once, as in eager, and its mask is the random
part; echo::dropout_output(x, mask, scale) is a deterministic op that makes
the output from x and the mask. A plan may recompute that op from a held x
and mask (1 byte per element) instead of holding the output.

Its first run costs nothing: the executor hands on native_dropout's own
output (an alias), and the graph says so (op attribute first_run_alias), so
echod leaves it out of the baseline compute. A recomputation gives the same value bit for bit: on the
CPU as native_dropout computes it (x * (mask in x's dtype * scale)), on
CUDA as its fused kernel does (x * mask * scale in float: the formula of
native_dropout_backward). tests/python/test_executor.py checks the CPU's.

With the eager compiler the random draw itself may be recomputed too, with
its random state replayed, the way torch.utils.checkpoint's
preserve_rng_state does (replay_dropout_draws): echo::rng_state(x) reads the
state of x's device generator just before the draw (5056 bytes on the CPU,
16 on CUDA), and echo::dropout_draw(x, p, state) is native_dropout drawing
from the live generator, so the first run advances it exactly as eager
does. Its recomputation (ops.recompute_substitute) is echo::dropout_replay:
the same draw from `state`, with the generator restored afterwards, so the
mask and output are the first run's bit for bit and the step's later draws
are eager's. A plan may then hold x and the state instead of the mask.
Inductor may reorder custom ops that share no data, so its graphs keep the
draw as it is.
"""
import contextlib
import operator
from typing import Tuple

import torch

from echo_torch import ops

_aten = torch.ops.aten


@torch.library.custom_op("echo::dropout_output", mutates_args=())
def dropout_output(x: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    if x.device.type == "cuda":
        return _aten.native_dropout_backward(x, mask, scale)
    return x * (mask.to(x.dtype) * scale)


@dropout_output.register_fake
def _(x, mask, scale):
    return torch.empty_like(x)


def _generator(device: torch.device) -> torch.Generator:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.default_generators[index]
    return torch.default_generator


# Bytes of a generator's state (Generator.get_state()): mt19937 on the CPU,
# Philox seed and offset on CUDA.
_STATE_BYTES = {"cpu": 5056, "cuda": 16}


@torch.library.custom_op("echo::rng_state", mutates_args=())
def rng_state(x: torch.Tensor) -> torch.Tensor:
    """The state of x's device generator, before the draw it precedes."""
    return _generator(x.device).get_state()


@rng_state.register_fake
def _(x):
    return torch.empty(_STATE_BYTES[x.device.type], dtype=torch.uint8)


@torch.library.custom_op("echo::dropout_draw", mutates_args=())
def dropout_draw(x: torch.Tensor, p: float,
                 state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """native_dropout(x, p, train=True) from the live generator, whose state
    is `state` (echo::rng_state just ran)."""
    out, mask = _aten.native_dropout(x, p, True)
    return out, mask


@torch.library.custom_op("echo::dropout_replay", mutates_args=())
def dropout_replay(x: torch.Tensor, p: float,
                   state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """echo::dropout_draw's outputs again: the draw from `state`, leaving the
    generator as it was."""
    generator = _generator(x.device)
    current = generator.get_state()
    generator.set_state(state)
    try:
        out, mask = _aten.native_dropout(x, p, True)
    finally:
        generator.set_state(current)
    return out, mask


def _draw_fake(x, p, state):
    return torch.empty_like(x), torch.empty_like(x, dtype=torch.bool)


dropout_draw.register_fake(_draw_fake)
dropout_replay.register_fake(_draw_fake)


def replay_dropout_draws(gm) -> int:
    """Rewrites every training native_dropout of `gm` on the CPU or CUDA
    into echo::rng_state + echo::dropout_draw (recomputable, replayed from
    the state). Returns how many were rewritten."""
    graph = gm.graph
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != _aten.native_dropout.default:
            continue
        args = list(node.args) + [node.kwargs.get("train")] * (3 - len(node.args))
        x, p, train = args[0], args[1], args[2]
        value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if train is False or not isinstance(p, (int, float)) or not 0 <= p < 1:
            continue
        if value is None or value.device.type not in _STATE_BYTES:
            continue
        with graph.inserting_before(node):
            state = graph.call_function(torch.ops.echo.rng_state.default, (x,))
        fake_mode = getattr(value, "fake_mode", None)
        with fake_mode if fake_mode is not None else contextlib.nullcontext():
            state.meta["val"] = torch.empty(_STATE_BYTES[value.device.type],
                                            dtype=torch.uint8)
        node.target = torch.ops.echo.dropout_draw.default
        node.args, node.kwargs = (x, float(p), state), {}
        rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


def split_dropout(gm) -> int:
    """Rewrites every training native_dropout of the joint graph `gm` whose
    output is read: its readers read echo::dropout_output(x, mask, scale)
    instead. Returns how many were split."""
    graph = gm.graph
    split = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (
                _aten.native_dropout.default, torch.ops.echo.dropout_draw.default):
            continue
        if node.target == _aten.native_dropout.default:
            args = list(node.args) + [node.kwargs.get("train")] * (3 - len(node.args))
            x, p, train = args[0], args[1], args[2]
        else:
            x, p, train = node.args[0], node.args[1], True
        getitems = {u.args[1]: u for u in node.users
                    if u.op == "call_function" and u.target is operator.getitem}
        output = getitems.get(0)
        if train is False or output is None or not output.users:
            continue
        if not isinstance(p, (int, float)) or not 0 <= p < 1:
            continue
        mask = getitems.get(1)
        if mask is None:
            with graph.inserting_after(output):
                mask = graph.call_function(operator.getitem, (node, 1))
            mask.meta["val"] = node.meta["val"][1] if "val" in node.meta else None
        after = max(output, mask, key=_position(graph))
        with graph.inserting_after(after):
            made = graph.call_function(torch.ops.echo.dropout_output.default,
                                       (x, mask, 1.0 / (1.0 - p)))
        made.meta.update(output.meta)
        output.replace_all_uses_with(made)
        made.meta[ops.FIRST_RUN_ALIAS] = output
        split += 1
    if split:
        gm.recompile()
    return split


def _position(graph):
    order = {n: i for i, n in enumerate(graph.nodes)}
    return lambda n: order[n]
