"""Chunked regions under the inductor compiler (capture.py): a region's
forward step becomes one opaque custom op, echo::chunked_forward, that
calls its RegionRunner; its backward step becomes one multiply per
gradient. Apart from chunked.py, which runs the regions, so that the
runner stays plain Python that any executor can call."""
from typing import Dict, List

import torch
import torch.fx as fx

from echo_torch.chunked import RegionRunner

_aten = torch.ops.aten

# Runners by handle, for echo::chunked_forward (a custom op takes no Python
# object, so Inductor's graph holds the handle).
_RUNNERS: Dict[int, "RegionRunner"] = {}


@torch.library.custom_op("echo::chunked_forward", mutates_args=())
def chunked_forward(inputs: List[torch.Tensor], handle: int) -> List[torch.Tensor]:
    """A region's forward step as one opaque op (Inductor calls it as an
    extern kernel): RegionRunner.forward, a gradient it never made as
    zeros."""
    runner = _RUNNERS[handle]
    values = runner.forward(*inputs)
    return [v if v is not None else torch.zeros(info.shape, dtype=info.dtype,
                                                 device=inputs[0].device)
            for v, info in zip(values, runner.output_infos())]


@chunked_forward.register_fake
def _(inputs, handle):
    return [torch.empty(info.shape, dtype=info.dtype, device=inputs[0].device)
            for info in _RUNNERS[handle].output_infos()]


def lower_for_inductor(gm: fx.GraphModule) -> int:
    """Rewrites a partition's chunked steps into what Inductor compiles: the
    forward step into echo::chunked_forward, the backward step into one
    multiply per gradient by the loss's gradient, whose results the graph
    reads from then on (Inductor reuses the buffers; eager scales in
    place). Returns how many steps were rewritten."""
    lowered = 0
    for node in list(gm.graph.nodes):
        runner = getattr(node.target, "__self__", None)
        if node.op != "call_function" or not isinstance(runner, RegionRunner):
            continue
        if node.target.__name__ == "forward":
            _RUNNERS.setdefault(id(runner), runner)
            node.target = torch.ops.echo.chunked_forward.default
            node.args = (list(node.args), id(runner))
        else:
            _scale_gradients(gm.graph, node)
        lowered += 1
    if lowered:
        gm.graph.lint()
        gm.recompile()
    return lowered


def _scale_gradients(graph: fx.Graph, step: fx.Node):
    order = {n: i for i, n in enumerate(graph.nodes)}
    loss_gradient, gradients = step.args[0], step.args[1:]
    for g in gradients:
        if not isinstance(g, fx.Node):
            continue
        later = [u for u in g.users if u is not step and order[u] > order[step]]
        with graph.inserting_after(step):
            scale = graph.call_function(torch.ops.prims.convert_element_type.default,
                                        (loss_gradient, g.meta["val"].dtype))
        with graph.inserting_after(scale):
            scaled = graph.call_function(_aten.mul.Tensor, (g, scale))
        value = g.meta["val"]
        with value.fake_mode:
            scale.meta["val"] = loss_gradient.meta["val"].to(value.dtype)
            scaled.meta["val"] = value * scale.meta["val"]
        for user in later:
            user.replace_input_with(g, scaled)
    graph.erase_node(step)
