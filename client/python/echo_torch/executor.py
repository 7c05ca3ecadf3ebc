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

The programs themselves, and how they run, are programs.py's.
"""
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx as fx

from echo_torch import ops
from echo_torch.convert import ConvertedGraph
from echo_torch.programs import (BackwardProgram, PlanError, Program, SlotMeta, _Instr,
                                 _map_leaves, _Slot, _slots_in)


@dataclasses.dataclass(frozen=True)
class ChunkStep:
    """A chunked region's step in a schedule, in place of an op index: its
    forward step (the region run in chunks, chunked.py) or its backward step
    (the region's gradients scaled by the loss's gradient)."""
    runner: Any  # chunked.RegionRunner
    forward: bool


@dataclasses.dataclass
class Programs:
    forward: Program
    backward: Program
    # Tensor ids of the forward-produced instances the forward saves.
    saved_activation_ids: List[str]
    saved_primal_ids: List[str]
    recompute_count: int
    # What the programs' graphs show of each slot (to_graph_module).
    slot_meta: Dict[int, Any] = dataclasses.field(default_factory=dict)
    slot_names: Dict[int, str] = dataclasses.field(default_factory=dict)

    # The programs as FX graphs, what an AOTAutograd partition_fn returns;
    # made when asked (a symbolic capture's sizes never ask, shape_family.py).
    @property
    def forward_module(self):
        return self.forward.to_graph_module(self.slot_meta, self.slot_names)

    @property
    def backward_module(self):
        return self.backward.to_graph_module(self.slot_meta, self.slot_names)


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
        forward=forward, backward=backward, slot_meta=slot_meta, slot_names=slot_names,
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
