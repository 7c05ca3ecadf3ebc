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
"""
import operator

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


def split_dropout(gm) -> int:
    """Rewrites every training native_dropout of the joint graph `gm` whose
    output is read: its readers read echo::dropout_output(x, mask, scale)
    instead. Returns how many were split."""
    graph = gm.graph
    split = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != _aten.native_dropout.default:
            continue
        args = list(node.args) + [node.kwargs.get("train")] * (3 - len(node.args))
        x, p, train = args[0], args[1], args[2]
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
