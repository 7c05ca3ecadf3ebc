"""Capture of the joint forward+backward graph through AOTAutograd.

Two entry points share one partition function:

- `capture_module(module, partitioner)`: AOTAutograd's `aot_function` over
  a functional call of an nn.Module (what `echo_torch.optimize` uses).
  Primals are the module's parameters, then its buffers, then the call's
  tensors, each tensor once (CallLayout: tied weights and a tensor passed
  twice are one primal).
- `make_partition_fn(...)` for the `torch.compile` backend
  (`echo_torch.backend`): Dynamo lifts parameters and buffers to graph
  inputs; they are told apart by type and by the source name Dynamo gives
  the placeholder.

The partition function receives the joint graph with fake example inputs
and `num_fwd_outputs` (which counts the updated buffers AOTAutograd returns
as extra forward outputs) and hands a JointGraph to `partitioner`, which
returns the forward and backward programs.
"""
import importlib
import time
import contextlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

from echo_torch.convert import (JointGraph, PrimalInfo, ROLE_BUFFER, ROLE_INPUT,
                                ROLE_PARAMETER)
from echo_torch import chunked_inductor, dropout, hf_masks, ops
from echo_torch.programs import is_echo_module, program_of
from echo_torch.shape_family import ShapeFamily
from echo_torch.log import logger

Partitioner = Callable[[JointGraph], Tuple[Callable, Callable]]

MIN_TORCH = (2, 4)


def torch_version() -> Tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def check_torch_version():
    if torch_version() < MIN_TORCH:
        raise RuntimeError(f"echo_torch needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}; "
                           f"this is torch {torch.__version__}")


def compile_program(gm, _example_inputs):
    """fw/bw compiler: runs the Program the partition's GraphModule mirrors
    (a boxed callable that frees values after their last reader); a graph
    partitioned elsewhere (torch's default partition, the backend's
    fallback) runs as traced."""
    if not is_echo_module(gm):
        from torch._functorch.aot_autograd import make_boxed_func
        return make_boxed_func(gm.forward)
    return program_of(gm)


COMPILERS = ("eager", "inductor")

# The ops a chunked loss region is proven from (planner/chunk/row_rules.h).
_LOSS_OPS = frozenset(("_log_softmax", "_log_softmax_backward_data", "nll_loss_forward",
                       "nll_loss_backward", "_softmax", "_softmax_backward_data"))


def _inductor_compile(gm, example_inputs):
    """compile_fx_inner on one side of the partition, with what compile_fx
    would have set up around it:
    - every output keeps the strides it was traced with: the forward's saved
      tensors are the backward's inputs, compiled against those strides
      (compile_fx lets Inductor pick their layout and tells the backward;
      our partition does not go through it);
    - random ops run as aten's (fallback_random): compile_fx's joint-graph
      passes, which would rewrite them into Inductor's, do not run either,
      and the plan never recomputes them, so eager's generator is right."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    try:
        from torch._inductor.compile_fx import record_original_output_strides
    except ImportError:  # older torch: outputs are user-visible by default
        record_original_output_strides = None
    if record_original_output_strides is not None:
        record_original_output_strides(gm)
        output = next(n for n in gm.graph.nodes if n.op == "output")
        leaves = pytree.arg_tree_leaves(*output.args)
        output.meta["user_visible_output_idxs"] = [
            i for i, n in enumerate(leaves) if isinstance(n, torch.fx.Node)]
    if chunked_inductor.lower_for_inductor(gm):
        # Without the Program it mirrors (a chunked step's runner holds
        # plan messages): Inductor's graph cache pickles the module.
        gm = torch.fx.GraphModule(gm, gm.graph)
    _loss_ops_as_aten(gm)
    with config.patch(fallback_random=True):
        return compile_fx_inner(gm, example_inputs)


def _loss_ops_as_aten(gm) -> None:
    """A loss op left whole for chunking (inner_compiler) that the plan did
    not chunk runs as aten's: Inductor, which has only the decomposition we
    skipped, is given a fallback for it (torch.compile's own graphs never
    reach it: they are decomposed before lowering)."""
    from torch._inductor import lowering
    for node in gm.graph.nodes:
        if (node.op == "call_function" and ops.base_name(node.target) in _LOSS_OPS
                and node.target not in lowering.lowerings):
            lowering.make_fallback(node.target, warn=False, override_decomp=True)


def inner_compiler(name: str):
    """(fw/bw compiler, decompositions) of an inner compiler: "eager" runs
    the programs op by op (the memory the plan predicts); "inductor"
    compiles the partition's graphs with TorchInductor, on a joint graph
    traced with Inductor's decompositions (the saved set is the plan's;
    Inductor fuses the recomputations into the backward's kernels)."""
    if name == "eager":
        return compile_program, None
    if name == "inductor":
        # Some of Inductor's decompositions call into its lowering module,
        # which compile_fx would have imported before tracing.
        importlib.import_module("torch._inductor.lowering")
        from torch._inductor.decomposition import select_decomp_table
        # The loss's ops stay whole, so echod can find a chunkable region
        # (planner/chunk/); unchunked, Inductor runs them as aten's.
        table = {op: fn for op, fn in select_decomp_table().items()
                 if ops.base_name(op) not in _LOSS_OPS}
        return _inductor_compile, table
    raise ValueError(f"unknown compiler {name!r}; one of {', '.join(COMPILERS)}")


def call_tree(args, kwargs) -> tuple:
    """(args, kwargs) with the keywords sorted: calls that differ only in
    the order of their keywords flatten alike (the signature sorts them)."""
    return tuple(args), dict(sorted(kwargs.items()))


class CallLayout:
    """How `optimize`'s capture passes one call to AOTAutograd: the module's
    parameters (each tensor once: tied weights under their first name, the
    other names get the same value from functional_call), its buffers, then
    the call's distinct tensors (a tensor passed twice, such as Hugging
    Face's `labels=input_ids`, is one primal read in both places). Every
    other argument is fixed in the trace, as the signature keys it.

    `primals` names the flat list in that order: its length is the joint
    graph's primal count by construction, so parameters are never taken
    for inputs."""

    def __init__(self, module: nn.Module, args: Sequence, kwargs: dict):
        self.state_names: List[str] = []
        self.primals: List[PrimalInfo] = []
        first: Dict[int, int] = {}  # id(tensor) -> position in the flat list
        for kind, named in ((ROLE_PARAMETER, module.named_parameters()),
                            (ROLE_BUFFER, module.named_buffers())):
            for name, value in named:
                if id(value) not in first:
                    first[id(value)] = len(self.primals)
                    self.state_names.append(name)
                    self.primals.append(PrimalInfo(kind, name))
        leaves, self.spec = pytree.tree_flatten(call_tree(args, kwargs))
        self.constants = [None if isinstance(v, torch.Tensor) else v for v in leaves]
        self.slots: List[Optional[int]] = []
        self._inputs: List[int] = []  # leaf index of each input primal
        for index, value in enumerate(leaves):
            if not isinstance(value, torch.Tensor):
                self.slots.append(None)
                continue
            if id(value) not in first:
                first[id(value)] = len(self.primals)
                self.primals.append(PrimalInfo(ROLE_INPUT, f"input_{len(self._inputs)}"))
                self._inputs.append(index)
            self.slots.append(first[id(value)])

    def flat(self, module: nn.Module, args: Sequence, kwargs: dict) -> list:
        """The flat primals of a call with this layout (the module's current
        parameters and buffers, then the call's distinct tensors)."""
        state = dict(module.named_parameters())
        state.update(module.named_buffers())
        leaves = pytree.tree_leaves(call_tree(args, kwargs))
        return [state[name] for name in self.state_names] + [leaves[i] for i in self._inputs]

    def unflatten(self, flat) -> Tuple[dict, tuple, dict]:
        """(parameters and buffers by name, args, kwargs) from flat primals."""
        state = dict(zip(self.state_names, flat))
        leaves = [flat[s] if s is not None else c for s, c in zip(self.slots, self.constants)]
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return state, args, kwargs


def module_primals(module: nn.Module, args: Sequence, kwargs: dict) -> List[PrimalInfo]:
    """The primals `capture_module` traces, named (CallLayout)."""
    return CallLayout(module, args, kwargs).primals


_PROFILER_ENTERS = frozenset(("_record_function_enter", "_record_function_enter_new"))


def _drop_profiler_ranges(gm) -> None:
    """Erases torch.profiler.record_function ranges (DDP's forward opens one;
    models may too) from the joint graph: annotations for the profiler with
    no effect on values, whose handles are not tensors a plan can place."""
    graph = gm.graph
    erased = False
    for enter in [n for n in graph.nodes if n.op == "call_function"
                  and ops.base_name(n.target) in _PROFILER_ENTERS]:
        exits = list(enter.users)
        if all(ops.base_name(u.target) == "_record_function_exit" and not u.users
               for u in exits):
            for node in exits:
                graph.erase_node(node)
            graph.erase_node(enter)
            erased = True
    if erased:
        gm.recompile()


def make_partition_fn(partitioner: Partitioner, name: str, capture: str,
                      primals: List[PrimalInfo],
                      started: Optional[float] = None,
                      tangents_may_be_missing: bool = False,
                      replay_random: bool = False, family=None):
    """An AOTAutograd partition_fn that converts and plans through
    `partitioner`. primals: the primals' names, one per primal of the joint
    graph (another count raises ValueError). started: when the
    capture began (default: now), for the log line. tangents_may_be_missing:
    the caller runs the backward without unused outputs' gradients
    (no_zero_gradients). replay_random: dropout draws may be recomputed with
    their random state replayed (dropout.py; eager programs only). family: a
    ShapeFamily (shape_family.py) when the trace has symbolic sizes; the
    partitioner then gets the graph at each concrete shape."""
    if started is None:
        started = time.perf_counter()

    def partition_fn(joint_module, joint_inputs, *, num_fwd_outputs, **_):
        _drop_profiler_ranges(joint_module)
        if replay_random:
            dropout.replay_dropout_draws(joint_module)
        dropout.split_dropout(joint_module)
        fake_primals = joint_inputs[0]
        if len(primals) != len(fake_primals):
            # Never guess: a parameter named an input would be marked as
            # the batch, and planned as freed after its last reader.
            raise ValueError(f"echo_torch: the joint graph of {name} has "
                             f"{len(fake_primals)} primals, the capture named "
                             f"{len(primals)}")
        nodes = sum(1 for n in joint_module.graph.nodes if n.op == "call_function")
        logger.info("echo_torch: captured %s (%d joint ops%s) in %.1f s", name, nodes,
                    ", symbolic sizes" if family is not None else "",
                    time.perf_counter() - started)

        def make_joint(module, inputs):
            return JointGraph(module, num_fwd_outputs, primals, name=name,
                              metadata={"capture": capture}, example_inputs=inputs,
                              tangents_may_be_missing=tangents_may_be_missing,
                              family=family)

        if family is not None:
            return family.partition(joint_module, joint_inputs, num_fwd_outputs, make_joint)
        return partitioner(make_joint(joint_module, joint_inputs))

    return partition_fn


def _known_output(value) -> bool:
    return value is None or isinstance(value, (torch.Tensor, int, float, bool, str))


def strip_unknown_outputs(out):
    """`out` with every leaf AOTAutograd cannot return (a Hugging Face
    DynamicCache, EncoderDecoderCache: objects pytree does not know) replaced
    by None. The model runs as configured: with `config.use_cache` on, a
    Hugging Face model builds its cache as in eager, and attention reads the
    cache's key/value copies, so the graph holds what eager holds (and
    Hugging Face skips the packed-sequence mask, as in eager with a cache);
    only the cache object is not returned."""
    leaves, spec = pytree.tree_flatten(out)
    unknown = sorted({type(v).__name__ for v in leaves if not _known_output(v)})
    if not unknown:
        return out
    logger.info("echo_torch: the planned step returns None in place of %s (not tensors "
                "torch can trace through)", ", ".join(unknown))
    return pytree.tree_unflatten([v if _known_output(v) else None for v in leaves], spec)


@contextlib.contextmanager
def cache_off_on_meta(module: nn.Module):
    """A Hugging Face cache starts from a constant (`torch.tensor([])` on the
    model's device), which cannot be traced on the meta device: a model on
    meta (planned, never run) is traced with `config.use_cache` off, its
    key/value copies left out, and the config restored after."""
    on_meta = any(p.device.type == "meta" for p in module.parameters())
    configs = {id(c): c for c in (getattr(m, "config", None) for m in module.modules())
               if getattr(c, "use_cache", False) is True} if on_meta else {}
    for config in configs.values():
        config.use_cache = False
    try:
        yield
    finally:
        for config in configs.values():
            config.use_cache = True


@contextlib.contextmanager
def tracing_as_compile():
    """torch.compiler.is_compiling() is True while the capture traces the
    model, as under torch.compile and torch.export (which sets it for its
    make_fx tracing too): libraries skip their data-dependent Python checks
    then (transformers' mask code: `padding_mask.all()`, packed-sequence
    detection), which a trace of fake tensors cannot answer. transformers'
    own is_tracing(tensor) looks for FakeTensor, not the functional tensors
    AOTAutograd traces with."""
    session = getattr(torch.compiler, "_compile_session_context", None)
    if session is not None:
        with session():
            yield
        return
    old = getattr(torch.compiler, "_is_compiling_flag", None)
    if old is None:  # an older torch without the flag: nothing to set
        yield
        return
    torch.compiler._is_compiling_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag = old


_COMPILED_BACKWARD = "CompiledFunctionBackward"


def _compiled_nodes(outputs):
    """The AOTAutograd nodes the tensors of `outputs` come from (through the
    views AOTAutograd regenerates outside its graph)."""
    found, seen = [], set()
    stack = [t.grad_fn for t in pytree.tree_leaves(outputs)
             if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if type(node).__name__ == _COMPILED_BACKWARD:
            found.append(node)
        elif len(seen) < 16:
            stack.extend(n for n, _ in node.next_functions)
    return found


def no_zero_gradients(outputs):
    """Autograd makes zeros for the gradient of every output of a custom
    Function that nobody differentiated (Hugging Face's logits beside its
    loss), before the backward's peak; eager makes none. Off for the step's
    compiled Function: the planned backward gets None and adds it away
    (executor.without_inputs)."""
    for node in _compiled_nodes(outputs):
        node.set_materialize_grads(False)
    return outputs


class ModuleCapture:
    """AOTAutograd's aot_function over `module` called with one layout of
    arguments (CallLayout); the first call traces and plans, later calls run
    the programs (the caller keys one capture per input signature). With
    `dims` (per input tensor of the layout, the dimensions traced symbolic;
    eager compiler only), one capture serves every size its guards admit
    (shape_family.py; `family.accepts`)."""

    def __init__(self, module: nn.Module, partitioner: Partitioner, args: Sequence,
                 kwargs: dict, compiler: str = "eager",
                 dims: Optional[Sequence[Tuple[int, ...]]] = None):
        from torch._functorch.aot_autograd import aot_function

        self.module = module
        self.layout = CallLayout(module, args, kwargs)
        # What transformers' mask code would see in eager (the caller keys
        # the capture on it too, hook_common._signature).
        self._masks = hf_masks.facts(args, kwargs)
        # Programs take None for a missing gradient; Inductor's code does not.
        self._no_zero_gradients = compiler == "eager"
        self.family = None
        if dims is not None:
            if compiler != "eager":
                raise ValueError("echo_torch: symbolic sizes need compiler='eager'")
            first = len(self.layout.state_names)
            self.family = ShapeFamily(range(first, len(self.layout.primals)), dims,
                                      partitioner)
        partition_fn = make_partition_fn(partitioner, type(module).__name__, "aot_module",
                                         self.layout.primals,
                                         tangents_may_be_missing=self._no_zero_gradients,
                                         replay_random=compiler == "eager",
                                         family=self.family)
        compile_fn, decompositions = inner_compiler(compiler)
        self._compiled = aot_function(
            self._traced, fw_compiler=compile_fn, bw_compiler=compile_fn,
            partition_fn=partition_fn, decompositions=decompositions,
            num_params_buffers=len(self.layout.state_names))
        self._traced_once = False

    def _traced(self, *flat):
        state, args, kwargs = self.layout.unflatten(flat)
        with cache_off_on_meta(self.module):
            out = torch.func.functional_call(self.module, state, args, kwargs)
        return strip_unknown_outputs(out)

    def accepts(self, args, kwargs) -> bool:
        """Whether a call of this layout with other sizes runs here (a
        symbolic capture whose guards hold for them)."""
        return (self.family is not None and
                self.family.accepts(self.layout.flat(self.module, args, kwargs)))

    def __call__(self, *args, **kwargs):
        flat = self.layout.flat(self.module, args, kwargs)
        # A symbolic trace whose first call failed after it (echod away) is
        # not traced again: AOTAutograd keeps it, and its shape environment.
        if self._traced_once or (self.family is not None and self.family.traced):
            out = self._compiled(*flat)
        else:
            symbolic = (self.family.tracing(flat) if self.family is not None
                        else contextlib.nullcontext())
            with tracing_as_compile(), hf_masks.as_eager(self._masks), symbolic:
                out = self._compiled(*flat)
            self._traced_once = True
        return no_zero_gradients(out) if self._no_zero_gradients else out


def capture_module(module: nn.Module, partitioner: Partitioner, args: Sequence,
                   kwargs: dict, compiler: str = "eager",
                   dims: Optional[Sequence[Tuple[int, ...]]] = None) -> ModuleCapture:
    """A ModuleCapture of `module` for calls shaped like `args`/`kwargs`
    (with `dims`, for every size of those dimensions)."""
    return ModuleCapture(module, partitioner, args, kwargs, compiler, dims)


def input_shapes(module: nn.Module, args: Sequence, kwargs: dict) -> List[Tuple[int, ...]]:
    """The shapes of a call's input tensors in CallLayout's order."""
    layout = CallLayout(module, args, kwargs)
    flat = layout.flat(module, args, kwargs)
    return [tuple(v.shape) for v in flat[len(layout.state_names):]]


def dynamo_primals(gm, example_inputs) -> List[PrimalInfo]:
    """Names of a Dynamo graph's inputs: parameters are nn.Parameter
    instances, buffers are named after `buffers` in their source."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    infos = []
    for node, value in zip(placeholders, example_inputs):
        if isinstance(value, nn.Parameter):
            kind = ROLE_PARAMETER
        elif "buffers" in node.name:
            kind = ROLE_BUFFER
        else:
            kind = ROLE_INPUT
        infos.append(PrimalInfo(kind, node.name))
    return infos
