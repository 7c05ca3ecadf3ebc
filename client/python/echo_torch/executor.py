"""Turns a plan's schedule into a forward and a backward program.

A schedule lists op executions in order; an op may appear again with
recompute=True. Each execution makes new instances of its outputs and every
reader uses the most recent instance, as in the planner's memory model. The
schedule is cut right after the original execution of the last forward op:
what runs before is the forward program, the rest (recomputations placed
before the first backward op included) the backward program. The
forward returns the forward outputs plus every instance the backward reads
(the saved set); recomputations run in the backward exactly where the
schedule puts them.

View ops are not executed where the schedule lists them: a view is derived
from the current instance of its base when first read, per program (see
convert.py). So the backward re-applies views to saved or recomputed bases
and never keeps an old base alive through a saved view.

Programs run as boxed functions (AOTAutograd's calling convention: one list
argument, which they clear) and free each value after its last reader, so
saved tensors die during the backward as the memory model assumes.
"""
import dataclasses
import operator
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx as fx

from echo_torch import ops
from echo_torch.convert import ConvertedGraph



class PlanError(ValueError):
    """The schedule cannot be executed on this graph."""


@dataclasses.dataclass(frozen=True)
class ChunkStep:
    """A chunked region's step in a schedule, in place of an op index: its
    forward step (the region run in chunks, chunked.py) or its backward step
    (the region's gradients scaled by the loss's gradient)."""
    runner: Any  # chunked.RegionRunner
    forward: bool


@dataclasses.dataclass(frozen=True)
class _Slot:
    index: int


@dataclasses.dataclass
class _Instr:
    target: Any
    args: Any
    kwargs: Any
    out: Any  # a slot index, or a list of slot indices/None per output
    frees: Tuple[int, ...] = ()


def _map_leaves(template, leaf_fn):
    """`template` with every leaf (slot, constant, scalar) replaced by
    leaf_fn(leaf); lists, tuples and dicts become plain ones (fx's immutable
    containers included)."""
    if isinstance(template, (list, tuple)):
        mapped = [_map_leaves(t, leaf_fn) for t in template]
        return mapped if isinstance(template, list) else tuple(mapped)
    if isinstance(template, dict):
        return {k: _map_leaves(v, leaf_fn) for k, v in template.items()}
    return leaf_fn(template)


def _fill(template, env):
    # The hot path of every step: not _map_leaves, to spare a call per leaf.
    if isinstance(template, _Slot):
        return env[template.index]
    if isinstance(template, (list, tuple)):
        filled = [_fill(t, env) for t in template]
        return filled if isinstance(template, list) else tuple(filled)
    if isinstance(template, dict):
        return {k: _fill(v, env) for k, v in template.items()}
    return template


def _slots_in(template, found):
    if isinstance(template, _Slot):
        found.append(template.index)
    elif isinstance(template, (list, tuple)):
        for t in template:
            _slots_in(t, found)
    elif isinstance(template, dict):
        for t in template.values():
            _slots_in(t, found)
    return found


class Program:
    """A straight-line list of op calls over numbered slots."""

    def __init__(self, name: str, inputs: List[int], instrs: List[_Instr],
                 outputs: List[Optional[int]]):
        # AOTAutograd passes one list and lets us clear it, so inputs (the
        # backward's saved tensors) are freed after their last reader. An
        # instance attribute, not a class one: Dynamo wraps the backward in
        # torch._dynamo.disable, whose functools.wraps copies only the
        # instance __dict__; without it the wrapper is called unboxed and the
        # caller's list keeps every saved tensor alive through the backward.
        self._boxed_call = True
        self.name = name
        self.inputs = inputs
        self.instrs = instrs
        self.outputs = outputs
        keep = {s for s in outputs if s is not None}
        last_use: Dict[int, int] = {}
        for i, instr in enumerate(instrs):
            for s in _slots_in((instr.args, instr.kwargs), []):
                last_use[s] = i
        frees: List[List[int]] = [[] for _ in instrs]
        for s, i in last_use.items():
            if s not in keep:
                frees[i].append(s)
        for i, instr in enumerate(instrs):
            outs = instr.out if isinstance(instr.out, list) else [instr.out]
            for s in outs:
                if s is not None and s not in last_use and s not in keep:
                    frees[i].append(s)  # nobody reads it
            instr.frees = tuple(frees[i])
        self.unused_inputs = tuple(s for s in inputs if s not in last_use and s not in keep)

    def __call__(self, *call_args):
        # Boxed (one list, cleared here) as AOTAutograd calls compiled
        # programs; unboxed when a wrapper (e.g. Dynamo's) unpacks the list.
        if len(call_args) == 1 and isinstance(call_args[0], list):
            args = call_args[0]
        else:
            args = list(call_args)
            del call_args
        return self.run(args)

    def run(self, args: list, updates: Optional[Dict[int, List[int]]] = None,
            apply=None):
        """Runs on `args` (a list, cleared). updates: {instruction index
        (-1: before the first): output positions} whose value goes to
        apply(position, value) right after that instruction instead of
        being returned (update_in_backward.py)."""
        outputs = list(self.outputs)

        def hand_over(index):
            for position in updates.get(index, ()):
                apply(position, env.pop(outputs[position]))
                outputs[position] = None

        env: Dict[int, Any] = dict(zip(self.inputs, args))
        if isinstance(args, list):
            args.clear()
        for s in self.unused_inputs:
            env.pop(s, None)
        if updates:
            hand_over(-1)
        for index, instr in enumerate(self.instrs):
            result = instr.target(*_fill(instr.args, env), **_fill(instr.kwargs, env))
            if isinstance(instr.out, list):
                # A comprehension, not a loop: a loop variable would keep the
                # op's last output (and its storage) alive until the next
                # multi-output op, past the frees the plan counts on.
                env.update({s: value for s, value in zip(instr.out, result) if s is not None})
            else:
                env[instr.out] = result
            del result
            for s in instr.frees:
                del env[s]
            if updates:
                hand_over(index)
        return [env[s] if s is not None else None for s in outputs]

    def __len__(self):
        return len(self.instrs)

    def slots(self) -> set:
        found = set(self.inputs) | {s for s in self.outputs if s is not None}
        for instr in self.instrs:
            found.update(_slots_in((instr.args, instr.kwargs), []))
            found.update(s for s in (instr.out if isinstance(instr.out, list) else [instr.out])
                         if s is not None)
        return found

    def to_graph_module(self, slot_meta: Dict[int, Any], slot_names: Dict[int, str]):
        """The same program as an FX GraphModule, for AOTAutograd's
        bookkeeping (it reads the partition's graphs: outputs saved for the
        backward, placeholders, their `val` metadata). `program_of(gm)` gives
        this Program back; the compilers run the Program."""
        graph = fx.Graph()
        root = torch.nn.Module()
        nodes: Dict[int, fx.Node] = {}

        def leaf_node(leaf):
            if isinstance(leaf, _Slot):
                return nodes[leaf.index]
            if isinstance(leaf, torch.Tensor):  # a constant: an attribute
                name = f"_echo_constant_{len(root._buffers)}"
                root.register_buffer(name, leaf, persistent=False)
                return graph.get_attr(name)
            return leaf

        def to_node(template):
            return _map_leaves(template, leaf_node)

        def define(slot, node):
            node.meta["val"] = slot_meta.get(slot)
            nodes[slot] = node

        for slot in self.inputs:
            define(slot, graph.placeholder(slot_names.get(slot, f"input_{slot}")))
        for instr in self.instrs:
            node = graph.call_function(instr.target, to_node(instr.args), to_node(instr.kwargs))
            if isinstance(instr.out, list):
                for i, slot in enumerate(instr.out):
                    if slot is not None:
                        define(slot, graph.call_function(operator.getitem, (node, i)))
            else:
                define(instr.out, node)
        graph.output([nodes[s] if s is not None else None for s in self.outputs])
        gm = fx.GraphModule(root, graph)
        # AOTAutograd may copy the module before compiling it (lazily, for
        # the backward); GraphModule's copies keep `meta`, and a Program
        # copies as itself.
        gm.meta[_PROGRAM_KEY] = self
        return gm

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self


@dataclasses.dataclass(frozen=True)
class SlotMeta:
    """What the backward needs to make zeros in place of a missing input."""
    shape: Tuple[int, ...]
    stride: Tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @staticmethod
    def of(value) -> Optional["SlotMeta"]:
        if not isinstance(value, torch.Tensor):
            return None
        return SlotMeta(tuple(value.shape), tuple(value.stride()), value.dtype, value.device)

    def zeros(self):
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype,
                                   device=self.device).zero_()


def _rename(template, alias: Dict[int, int]):
    return _map_leaves(template, lambda leaf: _Slot(alias.get(leaf.index, leaf.index))
                       if isinstance(leaf, _Slot) else leaf)


def without_inputs(program: Program, missing: Sequence[int],
                   meta: Dict[int, SlotMeta]) -> Program:
    """`program` for a call whose inputs at positions `missing` are None: the
    gradients of forward outputs that nobody used (autograd sends none when
    the capture turned off materializing zeros for them, capture.py).
    An add of a missing gradient is its other operand; any other reader gets
    zeros made right before it (and freed after its last reader); an output
    that is a missing gradient is None (a parameter reached only through an
    unused output gets no gradient, as in eager)."""
    zero = {program.inputs[i] for i in missing}
    fold = not any(ops.aliasing(i.target)[1] for i in program.instrs)
    alias: Dict[int, int] = {}
    next_slot = max(program.slots(), default=-1) + 1
    instrs: List[_Instr] = []

    def is_zero(leaf):
        return isinstance(leaf, _Slot) and leaf.index in zero

    for instr in program.instrs:
        args, kwargs = _rename(instr.args, alias), _rename(instr.kwargs, alias)
        read = [s for s in dict.fromkeys(_slots_in((args, kwargs), [])) if s in zero]
        if read:
            other = ops.zero_add_operand(instr.target, args, kwargs, is_zero)
            if (fold and other is not None and meta.get(args[other].index) is not None
                    and meta.get(args[other].index) == meta.get(instr.out)):
                alias[instr.out] = args[other].index
                continue
            made = {}
            for s in read:
                made[s], next_slot = next_slot, next_slot + 1
                instrs.append(_Instr(meta[s].zeros, (), {}, made[s]))
            args, kwargs = _rename(args, made), _rename(kwargs, made)
        instrs.append(_Instr(instr.target, args, kwargs, instr.out))
    outputs = [None if s is None or s in zero else alias.get(s, s) for s in program.outputs]
    return Program(program.name + "_without_" + "_".join(map(str, missing)),
                   program.inputs, instrs, outputs)


class BackwardProgram(Program):
    """The backward: runs `without_inputs` variants (made once per pattern)
    when autograd passes None for unused outputs' gradients. `assumed_missing`:
    the positions the plan assumed None (convert.py); a gradient at one of
    them warns once, as the step then holds more than echod predicted."""

    def __init__(self, name, inputs, instrs, outputs, meta: Dict[int, SlotMeta],
                 assumed_missing: Sequence[int] = (), required_missing: Sequence[int] = ()):
        super().__init__(name, inputs, instrs, outputs)
        self.meta = meta
        self.assumed_missing = tuple(assumed_missing)
        # Positions a chunked region took as zero: a gradient there cannot be
        # used (chunked.py), so it is an error, not a warning.
        self.required_missing = tuple(required_missing)
        self._variants: Dict[Tuple[int, ...], Program] = {}
        self._warned = False
        # Applies parameters' updates in the backward (update_in_backward.py).
        self.updater = None

    def __call__(self, *call_args):
        args = call_args[0] if len(call_args) == 1 and isinstance(call_args[0], list) \
            else list(call_args)
        missing = tuple(i for i, a in enumerate(args) if a is None)
        self._check_assumption(missing)
        program = self
        if missing:
            program = self._variants.get(missing)
            if program is None:
                program = self._variants[missing] = without_inputs(self, missing, self.meta)
        if self.updater is None:
            return program.run(args)
        return program.run(args, *self.updater.plan(program, args))

    def _check_assumption(self, missing):
        if set(self.required_missing) - set(missing):
            raise PlanError(
                "echo_torch: a forward output beside the loss got a gradient, but the plan "
                "runs the loss in chunks assuming it gets none; wrap the model with "
                "chunking='off' to train through that output")
        if self._warned or not set(self.assumed_missing) - set(missing):
            return
        self._warned = True
        warnings.warn(
            "echo_torch: a forward output the plan assumed unused (beside the loss) got a "
            "gradient; this step holds that gradient, which echod's prediction left out",
            RuntimeWarning, stacklevel=2)


_PROGRAM_KEY = "echo_torch_program"


def is_echo_module(gm) -> bool:
    return _PROGRAM_KEY in getattr(gm, "meta", {})


def program_of(gm) -> "Program":
    """The Program a GraphModule from Program.to_graph_module mirrors."""
    program = getattr(gm, "meta", {}).get(_PROGRAM_KEY)
    if program is None:
        raise PlanError("this graph was not partitioned by echo_torch")
    return program


@dataclasses.dataclass
class Programs:
    forward: Program
    backward: Program
    # The programs as FX graphs, what an AOTAutograd partition_fn returns.
    forward_module: Any
    backward_module: Any
    # Tensor ids of the forward-produced instances the forward saves.
    saved_activation_ids: List[str]
    saved_primal_ids: List[str]
    recompute_count: int


class _Builder:
    def __init__(self, converted: ConvertedGraph):
        self.c = converted
        self.next_slot = 0
        self.current: Dict[str, int] = {}  # tensor id -> slot of latest instance
        self.slot_tensor: Dict[int, str] = {}
        self.instrs: List[_Instr] = []
        self.view_cache: Dict[Tuple, Any] = {}

    def new_slot(self, tensor_id=None) -> int:
        s = self.next_slot
        self.next_slot += 1
        if tensor_id is not None:
            self.slot_tensor[s] = tensor_id
        return s

    def value(self, node: fx.Node) -> Any:
        """Template for reading a graph value: a slot or a constant."""
        if node.op == "get_attr":
            return getattr(self.c.joint.module, node.target)
        tid = self.c.tensor_of.get(node)
        if tid is None:
            raise PlanError(f"value {node.name} has no tensor in the echo graph")
        return _Slot(self.resolve(tid))

    def resolve(self, tid: str) -> int:
        prod = self.c.producer.get(tid)
        if prod is not None and self.c.ops[prod[0]].is_view:
            op_index, pos = prod
            info = self.c.ops[op_index]
            args, kwargs = self.templates(info.node)
            key = (op_index, tuple(_slots_in((args, kwargs), [])))
            outs = self.view_cache.get(key)
            if outs is None:
                outs = self.emit(op_index, args, kwargs)
                self.view_cache[key] = outs
            return outs[pos]
        slot = self.current.get(tid)
        if slot is None:
            raise PlanError(f"tensor {tid} has no live instance where it is read")
        return slot

    def templates(self, node: fx.Node):
        return (fx.node.map_arg(node.args, self.value),
                fx.node.map_arg(node.kwargs, self.value))

    def emit(self, op_index: int, args, kwargs, target=None,
             outputs: Optional[int] = None) -> List[Optional[int]]:
        """Appends a call of the op (or of `target` in its place, producing
        only its first `outputs` outputs)."""
        info = self.c.ops[op_index]
        wanted = info.outputs if outputs is None else info.outputs[:outputs]
        slots = [self.new_slot(t) if t is not None else None for t in wanted]
        out = slots if info.multi_output else slots[0]
        self.instrs.append(_Instr(target or info.node.target, _to_plain(args),
                                  _to_plain(kwargs), out))
        return slots

    def run_chunk(self, step: ChunkStep):
        runner = step.runner
        if step.forward:
            args = tuple(_Slot(self.resolve(t)) for t in runner.inputs)
            made = runner.loss_outputs + runner.gradients
            slots = [self.new_slot(t) for t in made]
            self.instrs.append(_Instr(runner.forward, args, {}, slots))
            for tid, slot in zip(made, slots):
                self.current[tid] = slot
            return
        args = tuple(_Slot(self.resolve(t))
                     for t in [runner.loss_gradient] + runner.gradients)
        self.instrs.append(_Instr(runner.backward, args, {}, self.new_slot()))

    def run_op(self, op_index: int, recompute: bool):
        info = self.c.ops[op_index]
        if info.is_view:
            return  # derived on first read
        source = info.node.meta.get(ops.FIRST_RUN_ALIAS)
        if source is not None and not recompute and source in self.c.tensor_of:
            # The original run hands on `source`'s value (dropout.py).
            slot = self.new_slot(info.outputs[0])
            self.instrs.append(_Instr(torch.ops.aten.alias.default,
                                      (_Slot(self.resolve(self.c.tensor_of[source])),),
                                      {}, slot))
            self.current[info.outputs[0]] = slot
            return
        args, kwargs = self.templates(info.node)
        substitute = ops.recompute_substitute(info.node.target) if recompute else None
        if substitute is not None:
            emitted = self.emit(op_index, substitute.args(args), kwargs, substitute.target,
                                substitute.outputs)
        else:
            emitted = self.emit(op_index, args, kwargs)
        for tid, slot in zip(info.outputs, emitted):
            if tid is not None:
                self.current[tid] = slot


def _to_plain(template):
    """fx's immutable containers -> plain tuples/lists/dicts."""
    return _map_leaves(template, lambda leaf: leaf)


def build_programs(converted: ConvertedGraph,
                   schedule: Sequence[Tuple[int, bool]]) -> Programs:
    """schedule: (op index, recompute) per execution, as a plan lists them."""
    c = converted
    b = _Builder(c)
    primal_slots = []
    for node in c.primal_nodes:
        s = b.new_slot(c.tensor_of[node])
        b.current[c.tensor_of[node]] = s
        primal_slots.append(s)
    tangent_ids = [c.tensor_of[n] for n in c.tangent_nodes]

    # A chunked region's ops run inside its steps, not on their own.
    chunked = set()
    for op_index, _ in schedule:
        if isinstance(op_index, ChunkStep):
            chunked.update(op_index.runner.op_indices)
    # The forward ends with the last original forward op or forward step.
    forward_end = max((i for i, (op, rec) in enumerate(schedule)
                       if (op.forward if isinstance(op, ChunkStep)
                           else not rec and op < c.first_backward_op)), default=-1)
    next_original = 0
    recompute_count = 0
    fwd_instrs = fwd_out_slots = None
    fwd_slot_limit = None
    for position, (op_index, recompute) in enumerate(schedule):
        while next_original in chunked:
            next_original += 1
        step = op_index if isinstance(op_index, ChunkStep) else None
        if step is None and not 0 <= op_index < len(c.ops):
            raise PlanError(f"schedule names op index {op_index} outside the graph")
        if position > forward_end and fwd_instrs is None:
            # Every forward op has run: what follows, recomputations
            # included, is the backward's (a recomputation placed between
            # the forward's end and the first backward op would otherwise
            # be held across the boundary, i.e. stashed).
            fwd_out_slots = [b.resolve(c.tensor_of[n]) if n is not None else None
                             for n in c.fwd_outputs]
            fwd_instrs, b.instrs = b.instrs, []
            fwd_slot_limit = b.next_slot
            b.view_cache = {}
            for tid in tangent_ids:
                b.current[tid] = b.new_slot(tid)
        if step is not None:
            b.run_chunk(step)
            continue
        if recompute:
            if op_index >= next_original:
                raise PlanError(f"op {c.ops[op_index].node.name} recomputed before it ran")
            recompute_count += 1
        else:
            if op_index != next_original:
                raise PlanError(f"op {c.ops[op_index].node.name} out of graph order")
            next_original += 1
        b.run_op(op_index, recompute)
    while next_original in chunked:
        next_original += 1
    if next_original != len(c.ops):
        raise PlanError(f"schedule ends before op {c.ops[next_original].node.name}")
    if fwd_instrs is None:
        raise PlanError("graph has no backward ops")
    bwd_out_slots = [b.resolve(c.tensor_of[n]) if n is not None else None
                     for n in c.bwd_outputs]
    bwd_instrs = b.instrs

    tangent_slots = [b.current[t] for t in tangent_ids]
    used_in_bwd = set(_slots_in([(i.args, i.kwargs) for i in bwd_instrs], []))
    used_in_bwd.update(s for s in bwd_out_slots if s is not None)
    saved = sorted(s for s in used_in_bwd if s < fwd_slot_limit)
    node_of = {tid: node for node, tid in c.tensor_of.items()}
    slot_meta = {s: node_of[t].meta.get("val") for s, t in b.slot_tensor.items()
                 if t in node_of}
    forward = Program("forward", primal_slots, fwd_instrs, fwd_out_slots + saved)
    unused = set(c.unused_tangents)
    zero = {t for op, _ in schedule if isinstance(op, ChunkStep) for t in op.runner.zero_inputs}
    backward = BackwardProgram(
        "backward", saved + tangent_slots, bwd_instrs, bwd_out_slots,
        {s: SlotMeta.of(v) for s, v in slot_meta.items()},
        [len(saved) + j for j, t in enumerate(tangent_ids) if t in unused],
        [len(saved) + j for j, t in enumerate(tangent_ids) if t in zero])
    primal_set = set(primal_slots)
    slot_names = {s: node_of[t].name for s, t in b.slot_tensor.items() if t in node_of}
    return Programs(
        forward=forward, backward=backward,
        forward_module=forward.to_graph_module(slot_meta, slot_names),
        backward_module=backward.to_graph_module(slot_meta, slot_names),
        saved_activation_ids=[b.slot_tensor[s] for s in saved if s not in primal_set],
        saved_primal_ids=[b.slot_tensor[s] for s in saved if s in primal_set],
        recompute_count=recompute_count)


def program_from_graph_module(gm: fx.GraphModule, name: str = "graph") -> Program:
    """An FX graph as a freeing boxed Program (for partitions made elsewhere,
    e.g. functorch's min-cut), so they run and free exactly like ours."""
    slots: Dict[fx.Node, int] = {}
    inputs, instrs, outputs = [], [], []

    def value(node):
        if node.op == "get_attr":
            return getattr(gm, node.target)
        return _Slot(slots[node])

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            slots[node] = len(slots)
            inputs.append(slots[node])
        elif node.op == "get_attr":
            continue
        elif node.op == "call_function":
            slots[node] = len(slots)
            instrs.append(_Instr(node.target, _to_plain(fx.node.map_arg(node.args, value)),
                                 _to_plain(fx.node.map_arg(node.kwargs, value)), slots[node]))
        elif node.op == "output":
            flat = torch.utils._pytree.tree_flatten(node.args[0])[0]
            outputs = [slots[n] if isinstance(n, fx.Node) else None for n in flat]
        else:
            raise PlanError(f"unsupported FX node kind {node.op}")
    return Program(name, inputs, instrs, outputs)
