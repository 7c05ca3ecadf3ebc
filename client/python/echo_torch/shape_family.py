"""One capture for every size of a call (issue 46): the joint graph traced
with some input dimensions symbolic, then planned per concrete shape.

A loop over changing sequence lengths would otherwise trace, convert, measure
and plan every length. Here AOTAutograd traces once with the chosen input
dimensions symbolic (sizes of 0 and 1 specialize, as in torch.compile). Each
new concrete shape then costs no trace: the symbolic joint graph is made
concrete by substituting the sizes (`concrete_joint`), and that graph is
converted, priced with the first shape's measurement scaled to its sizes
(pipeline.py), planned and turned into programs as any capture is.

AOTAutograd compiles one forward and one backward for the symbolic graph;
here they are dispatchers. The forward picks the programs of the call's
shape (planning it on first sight) and runs them; it returns the outputs
and, as the one tensor saved for the backward, a token carrying that
shape's backward program and the values its forward saved. The backward
takes them off the token, so they are freed as the program reads them, as
the plan assumes.

A call is run by a family only when the guards the trace recorded hold for
its sizes (`ShapeFamily.accepts`); otherwise it gets a capture of its own.
"""
import contextlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx as fx

from echo_torch.client import PlanningError
from echo_torch.errors import ServerUnavailable
from echo_torch.log import logger
from echo_torch.programs import PlanError, Program, _Instr, _Slot

# optimize(dynamic_shapes=...): "auto" traces a call's first shape as it is
# and symbolic in the dimensions that change at the second; True symbolic
# in every input dimension from the first call; False one capture per shape.
POLICIES = ("auto", True, False)

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
# Whether the running backward keeps the graph (retain_graph=True); torch
# before 2.5 cannot say, and gets one capture per shape (supported()).
_KEEP_GRAPH = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
# Nodes that only check sizes; true for every shape the guards admit.
_SIZE_CHECKS = frozenset(("_assert_scalar", "sym_constrain_range_for_size",
                          "sym_constrain_range"))


def supported() -> bool:
    """Whether this torch can run symbolic captures."""
    return _KEEP_GRAPH is not None


class SymbolicCaptureError(PlanError):
    """The symbolic capture cannot serve a call (its sizes, its graph):
    the call is captured at its own shape instead."""


def check_policy(policy) -> None:
    if policy is not True and policy is not False and policy != "auto":
        raise ValueError(f"dynamic_shapes must be 'auto', True or False, not {policy!r}")


def changed_dims(before: Sequence[Tuple[int, ...]],
                 after: Sequence[Tuple[int, ...]]) -> List[Tuple[int, ...]]:
    """Per input tensor, the dimensions whose size differs between two calls
    of the same structure."""
    return [tuple(d for d, (a, b) in enumerate(zip(x, y)) if a != b)
            for x, y in zip(before, after)]


def all_dims(shapes: Sequence[Tuple[int, ...]]) -> List[Tuple[int, ...]]:
    """Every dimension of every input tensor (dynamic_shapes=True)."""
    return [tuple(range(len(s))) for s in shapes]


class ShapeFamily:
    """The symbolic side of one capture: which input dimensions are
    symbolic, the trace's shape environment, and the programs per concrete
    shape (the dispatchers AOTAutograd runs)."""

    def __init__(self, input_positions: Sequence[int], dims: Sequence[Tuple[int, ...]],
                 partitioner: Callable):
        """partitioner: a JointGraph of one size (its `family` set) -> that
        size's (forward Program, backward Program)."""
        # Positions of the input tensors among the flat primals, and the
        # symbolic dimensions of each.
        self.input_positions = list(input_positions)
        self.dims = [tuple(d) for d in dims]
        self._partitioner = partitioner
        self._shape_env = None
        # (input position, dim) -> sympy symbol of the trace, or the size
        # a dimension was traced at (static, or specialized by the trace).
        self._symbols: Dict[Tuple[int, int], object] = {}
        self._static: Dict[Tuple[int, int], int] = {}
        self._symbolic_joint = None  # (module, inputs, make_joint)
        # Set when AOTAutograd first runs the forward: its compiled result
        # (and this trace's shape environment) is then kept for good.
        self._running = False
        self._programs: Dict[tuple, Tuple[Program, Program]] = {}
        # The first shape's measurement and its ops' bytes (op_bytes, ...):
        # pipeline.py scales it to later shapes.
        self.reference_profile = None

    @contextlib.contextmanager
    def tracing(self, flat: Sequence[torch.Tensor]):
        """AOTAutograd's trace with the chosen dimensions symbolic: its
        fake mode comes from the tracing context, which names how each input
        is made fake (every other dimension static, parameters static)."""
        from torch._dynamo.source import ConstantSource
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import (DimDynamic, ShapeEnv,
                                                           StatefulSymbolicContext)
        # No duck sizing: two sizes equal at the trace are not the same size.
        self._shape_env = ShapeEnv(duck_shape=False)
        context = torch._guards.TracingContext(FakeTensorMode(shape_env=self._shape_env))
        for k, (position, dims) in enumerate(zip(self.input_positions, self.dims)):
            value = flat[position]
            context.tensor_to_context[value] = StatefulSymbolicContext(
                dynamic_sizes=[DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC
                               for d in range(value.dim())],
                tensor_source=ConstantSource(f"echo_input_{k}"))
        with torch._guards.tracing(context):
            yield

    def key(self, flat: Sequence) -> tuple:
        return tuple(tuple(flat[p].shape) for p in self.input_positions)

    def bindings(self, flat: Sequence) -> Optional[dict]:
        """{symbol: size} for a call, or None when its sizes break what the
        trace assumed (a guard, a range such as >= 2, a specialization)."""
        if not self.traced:
            return None
        env = self._shape_env
        for (position, dim), size in self._static.items():
            if int(flat[position].shape[dim]) != size:
                return None
        bound: dict = {}
        for (position, dim), symbol in self._symbols.items():
            value = int(flat[position].shape[dim])
            if bound.setdefault(symbol, value) != value:
                return None
        ranges = getattr(env, "var_to_range", {})
        try:
            # A symbol the trace replaced (a size it found equal to another)
            # takes its replacement's value; the guards may name either.
            for symbol, replaced in env.replacements.items():
                value = int(replaced.xreplace(bound))
                if bound.setdefault(symbol, value) != value:
                    return None
            for symbol, value in bound.items():
                span = ranges.get(symbol)
                if span is not None and not span.lower <= value <= span.upper:
                    return None
            for guard in env.guards:
                if not bool(guard.expr.xreplace(bound)):
                    return None
        except (TypeError, ValueError):  # a guard on a size not bound here
            return None
        return bound

    @property
    def traced(self) -> bool:
        """Whether the symbolic trace is done and compiled (even if its
        first call failed after that, in planning)."""
        return self._running

    def accepts(self, flat: Sequence) -> bool:
        return self.bindings(flat) is not None

    def partition(self, joint_module: fx.GraphModule, joint_inputs, num_fwd_outputs: int,
                  make_joint: Callable) -> Tuple[fx.GraphModule, fx.GraphModule]:
        """AOTAutograd's partition of the symbolic joint graph: the
        dispatchers, as graphs for its bookkeeping."""
        primals, tangents = joint_inputs
        for position in self.input_positions:
            for d, size in enumerate(primals[position].shape):
                if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                    self._symbols[(position, d)] = size.node.expr
                elif isinstance(size, torch.SymInt) and size.node.expr.is_number:
                    self._static[(position, d)] = int(size.node.expr)
                elif isinstance(size, int):
                    self._static[(position, d)] = size
                else:  # an expression of other sizes: not bound from this call
                    raise SymbolicCaptureError(f"dimension {d} of input {position} was "
                                               f"traced as {size}, which a call cannot bind")
        self._symbolic_joint = (joint_module, joint_inputs, make_joint)
        output = next(n for n in joint_module.graph.nodes if n.op == "output")
        results = list(output.args[0])
        # As AOTAutograd sees it, the token is an empty view of a primal: a
        # saved tensor sharing an input's storage is not donated to the
        # backward, so backward(retain_graph=True) stays allowed after
        # ordinary steps (a donated one refuses it).
        primal = next(v for v in primals if isinstance(v, torch.Tensor))
        with primal.fake_mode:
            token = primal.as_strided((0,), (1,))
        fwd_meta = [_val(n) for n in results[:num_fwd_outputs]] + [token]
        bwd_meta = [_val(n) for n in results[num_fwd_outputs:]]
        forward = _dispatcher("forward", list(primals), fwd_meta, self._forward)
        backward = _dispatcher("backward", [token] + list(tangents), bwd_meta, self._backward)
        self._num_fwd_outputs = num_fwd_outputs
        return forward, backward

    def _programs_for(self, flat: Sequence) -> Tuple[Program, Program]:
        key = self.key(flat)
        found = self._programs.get(key)
        if found is not None:
            return found
        bound = self.bindings(flat)
        if bound is None:  # EchoModule checks accepts() first
            raise SymbolicCaptureError(f"input sizes {key} break the symbolic capture's "
                                       "guards")
        module, inputs, make_joint = self._symbolic_joint
        try:
            joint = make_joint(*concrete_joint(module, inputs, bound))
        except Exception as error:  # noqa: BLE001 - named as the family's failure
            raise SymbolicCaptureError(f"the symbolic graph at sizes {key}: "
                                       f"{type(error).__name__}: {error}") from error
        try:
            found = self._partitioner(joint)
        except (PlanningError, ServerUnavailable):
            raise  # echod's answer for this size: the call's, as for any capture
        except Exception as error:  # noqa: BLE001 - converting or building this size
            raise SymbolicCaptureError(f"planning sizes {key}: {type(error).__name__}: "
                                       f"{error}") from error
        self._programs[key] = found
        logger.info("echo_torch: planned input sizes %s without a new capture", key)
        return found

    def _forward(self, flat: list):
        self._running = True
        forward, backward = self._programs_for(flat)
        outputs = forward.run(flat)
        n = self._num_fwd_outputs
        token = torch.empty(0, dtype=torch.uint8, device=_device_of(outputs))
        # The token is the one tensor saved for the backward, and a tensor's
        # attributes live as long as it does. Detached: a saved forward
        # output would otherwise hold, through its grad_fn, the autograd
        # node that holds the token, a cycle no collector sees when no
        # backward runs. The versions catch in-place changes before the
        # backward, as autograd's own saved tensors do.
        saved = [v.detach() if isinstance(v, torch.Tensor) else v for v in outputs[n:]]
        token._echo_saved = (backward, saved, [_version(v) for v in saved])
        return outputs[:n] + [token]

    def _backward(self, values: list):
        token = values[0]
        # retain_graph=True: the saved values stay for the next backward.
        keep = _KEEP_GRAPH()
        payload = (token.__dict__.get if keep else token.__dict__.pop)("_echo_saved", None)
        del token
        if payload is None:
            raise PlanError(
                "echo_torch: the backward of a model planned across input sizes found no "
                "saved values: a backward ran already without retain_graph=True, or "
                "saved_tensors_hooks (save_on_cpu) replaced the tensor that carries them; "
                "wrap the model with dynamic_shapes=False for such steps")
        backward, saved, versions = payload
        del payload
        if [_version(v) for v in saved] != versions:
            raise RuntimeError(
                "echo_torch: one of the variables needed for gradient computation has been "
                "modified by an inplace operation after the forward")
        args = list(saved)
        del saved
        args.extend(values[1:])
        values.clear()
        return backward(args)


class _Dispatch(Program):
    """A one-instruction Program whose call takes the boxed argument list
    itself: the values reach the programs of the call's shape with no
    other reference, so those free each one after its last reader (a
    gradient the backward reads early is not held to its end)."""

    def run(self, args: list, updates=None, apply=None):
        values = list(args)
        if isinstance(args, list):
            args.clear()
        return self.instrs[0].target(values)


def _version(value) -> int:
    return value._version if isinstance(value, torch.Tensor) else 0


def _device_of(values) -> torch.device:
    for value in values:
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")


def _val(node):
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _dispatcher(name: str, inputs: list, outputs: list, call) -> fx.GraphModule:
    """A _Dispatch calling `call` with the list of every input, as the
    graph AOTAutograd reads (placeholders and outputs with their values)."""
    count = len(inputs)
    out_slots = [count + i if v is not None else None for i, v in enumerate(outputs)]
    program = _Dispatch(name, list(range(count)),
                      [_Instr(call, tuple(_Slot(i) for i in range(count)), {},
                              [count + i for i in range(len(outputs))])],
                      out_slots)
    meta = {i: v for i, v in enumerate(inputs)}
    meta.update({count + i: v for i, v in enumerate(outputs)})
    return program.to_graph_module(meta, {})


def concrete_joint(module: fx.GraphModule, inputs, bound: dict):
    """(module, (primals, tangents)): the symbolic joint graph at the sizes
    `bound`: every size computation folded into a constant, every value's
    fake tensor made at its concrete shape and strides (what a trace at that
    shape records)."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    mode = FakeTensorMode()
    sizes: dict = {}

    def size(value):
        if not isinstance(value, _SYMBOLIC):
            return value
        expr = value.node.expr
        found = sizes.get(expr)
        if found is None:
            found = expr.xreplace(bound)
            kind = bool if isinstance(value, torch.SymBool) else (
                int if isinstance(value, torch.SymInt) else float)
            found = sizes[expr] = kind(found)
        return found

    def concrete(value):
        if isinstance(value, FakeTensor):
            # Made directly over a meta tensor: the fake mode's dispatch of
            # empty_strided costs ten times more, per value of the graph.
            shape = tuple(size(s) for s in value.shape)
            stride = tuple(size(s) for s in value.stride())
            return FakeTensor(mode, torch.empty_strided(shape, stride, dtype=value.dtype,
                                                        device="meta"), value.device)
        if isinstance(value, (list, tuple)):
            return type(value)(concrete(v) for v in value)
        return size(value)

    graph = fx.Graph()
    env: Dict[fx.Node, object] = {}
    for node in module.graph.nodes:
        value = node.meta.get("val")
        if node.op == "call_function" and isinstance(value, _SYMBOLIC):
            env[node] = size(value)
            continue
        if node.op == "call_function" and getattr(node.target, "__name__", "").split(".")[0] \
                in _SIZE_CHECKS:
            continue
        copy = graph.node_copy(node, lambda n: env[n])
        copy.meta["val"] = concrete(value)
        copy.meta.pop("tensor_meta", None)
        env[node] = copy
    primals, tangents = inputs
    return (fx.GraphModule(module, graph),
            ([concrete(v) for v in primals], [concrete(v) for v in tangents]))
