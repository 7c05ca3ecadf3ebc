"""Programs: straight-line lists of op calls over numbered slots, what the
executor (executor.py) builds from a plan and AOTAutograd runs.

Programs run as boxed functions (AOTAutograd's calling convention: one list
argument, which they clear) and free each value after its last reader, so
saved tensors die during the backward as the memory model assumes. The
backward runs a variant without the gradients autograd did not send
(without_inputs), and can hand gradients to the optimizer where the plan
updates in the backward (Program.run, update_in_backward.py).
"""
import dataclasses
import operator
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx as fx

from echo_torch import ops


class PlanError(ValueError):
    """The schedule cannot be executed on this graph."""


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

    def run(self, args: list, updates: Optional[Dict[int, list]] = None, apply=None):
        """Runs on `args` (a list, cleared). updates: {instruction index
        (-1: before the first): [(output position, early)]}: right after
        that instruction the instructions `early` run (the views that make
        the output from its storage base, which would otherwise run at the
        end, and are skipped there), and the output goes to
        apply(position, value) instead of being returned
        (update_in_backward.py)."""
        outputs = list(self.outputs)
        skip = {i for hand in (updates or {}).values() for _, early in hand for i in early}

        def hand_over(index):
            for position, early in updates.get(index, ()):
                for i in early:
                    _execute(self.instrs[i], env)
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
            if index in skip:
                continue
            _execute(instr, env)
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


def _execute(instr: _Instr, env: Dict[int, Any]) -> None:
    """Runs one instruction on `env` and frees what it read last."""
    result = instr.target(*_fill(instr.args, env), **_fill(instr.kwargs, env))
    if isinstance(instr.out, list):
        # A comprehension, not a loop: a loop variable would keep the op's
        # last output (and its storage) alive until the next multi-output
        # op, past the frees the plan counts on.
        env.update({s: value for s, value in zip(instr.out, result) if s is not None})
    else:
        env[instr.out] = result
    del result
    for s in instr.frees:
        del env[s]


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
