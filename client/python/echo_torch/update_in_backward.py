"""Each parameter's update applied in the backward, as soon as its gradient
is complete, and the gradient freed there (torchtune's optimizer_in_bwd):
`optimize(model, optimizer=opt, update_in_backward=True)`.

echod decides where it is worth it (OptimizerSpec.update_in_backward): its
plan then carries an op "echo.update_in_backward:<gradient id>" per
gradient, after the last reader of the gradient and of its parameter. The
backward program hands those gradients to the user's optimizer there
(`Updater`), and returns None for them, so `optimizer.step()` finds no
gradient and skips those parameters.

It is only valid for a loop that runs one backward per `optimizer.step()`
and leaves gradients alone in between: clipping (`clip_grad_norm_`),
unscaling (`GradScaler`), accumulation and data-parallel reduction all read
or change gradients after the backward. `LoopWatch` learns the loop from its
first iteration, planned as usual, and turns the updates on from the next
one only if that iteration was one backward, untouched gradients, one step.
"""
import warnings
from typing import Callable, Dict, List, Optional, Tuple

import torch

from echo_torch import ops, proto
from echo_torch.convert import storage_of
from echo_torch.programs import _slots_in

_g = proto.graph_pb2
UPDATE_OP_PREFIX = "echo.update_in_backward:"


def updating_in_backward(spec: "_g.OptimizerSpec") -> "_g.OptimizerSpec":
    """`spec` with update_in_backward set."""
    moved = _g.OptimizerSpec()
    moved.CopyFrom(spec)
    moved.update_in_backward = True
    return moved


def updated_positions(converted, response) -> List[int]:
    """The backward's output positions whose gradients echod's plan updates
    in the backward (none when the plan has no such op)."""
    if response is None:
        return []
    gradients = {e.op_id[len(UPDATE_OP_PREFIX):] for e in response.schedule
                 if e.op_id.startswith(UPDATE_OP_PREFIX)}
    # A gradient that is a view is named, and updated, on its storage.
    return [i for i, node in enumerate(converted.bwd_outputs) if node is not None
            and storage_of(converted.view_bases, converted.tensor_of.get(node)) in gradients]


def _storage(tensor) -> Optional[int]:
    if not isinstance(tensor, torch.Tensor):
        return None
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def _is_view(instr) -> bool:
    views, written = ops.aliasing(instr.target)
    return bool(views) and any(views) and not written


def _reads(instr) -> List[int]:
    """The slots an instruction reads, in order, each once."""
    return list(dict.fromkeys(_slots_in((instr.args, instr.kwargs), [])))


class _Layout:
    """What Updater needs to know of a program, once per program: where each
    slot is made and read, and the view instructions (a view's parent is
    the slot it views)."""

    def __init__(self, program):
        self.defined: Dict[int, int] = {}
        self.readers: Dict[int, List[int]] = {}
        self.parent: Dict[int, int] = {}
        self.children: Dict[int, List[int]] = {}
        for index, instr in enumerate(program.instrs):
            read = _reads(instr)
            for s in read:
                self.readers.setdefault(s, []).append(index)
            for s in (instr.out if isinstance(instr.out, list) else [instr.out]):
                if s is None:
                    continue
                self.defined[s] = index
                if read and _is_view(instr):
                    self.parent[s] = read[0]
                    self.children.setdefault(read[0], []).append(s)

    def chain(self, slot: int) -> Tuple[List[int], List[int]]:
        """(the view instructions that make `slot` from its storage base, in
        order; the slots along the way, base first)."""
        instrs, slots = [], [slot]
        while slot in self.parent:
            instrs.append(self.defined[slot])
            slot = self.parent[slot]
            slots.append(slot)
        return instrs[::-1], slots[::-1]

    def last_use(self, slot: int, besides=()) -> int:
        """The last instruction that reads `slot` or a view made from it,
        other than `besides`."""
        last = max((i for i in self.readers.get(slot, ()) if i not in besides), default=-1)
        for child in self.children.get(slot, ()):
            last = max(last, self.last_use(child, besides))
        return last


class Updater:
    """Runs the user's optimizer on one parameter at a time inside the
    backward. parameters: the backward's output position -> the parameter
    whose gradient it is, for the positions the plan updates."""

    def __init__(self, optimizer: torch.optim.Optimizer,
                 parameters: Dict[int, torch.nn.Parameter], on_update: Callable[[], None]):
        self.optimizer = optimizer
        self.parameters = parameters
        self._on_update = on_update
        step = type(optimizer).step
        # The step without the hooks optimizer.step() runs (the user's step
        # hooks, the LR scheduler's count): those belong to the user's call.
        self._step = step.__wrapped__ if getattr(step, "hooked", False) else step
        self._groups: Dict[int, dict] = {}
        self._layouts: Dict[int, _Layout] = {}  # per program
        self._plans: Dict[tuple, Dict[int, list]] = {}  # per program and aliasing

    def plan(self, program, args: list):
        """(updates, apply) for Program.run: each position's update right
        after the last instruction that reads its gradient (or the storage
        the gradient views), its parameter or a view of it; the views that
        make a gradient from its storage run there too, not at the end."""
        layout = self._layouts.get(id(program))
        if layout is None:
            layout = self._layouts[id(program)] = _Layout(program)
        by_storage: Dict[int, List[int]] = {}
        for slot, value in zip(program.inputs, args):
            ptr = _storage(value)
            if ptr is not None:
                by_storage.setdefault(ptr, []).append(slot)
        aliases = tuple(tuple(by_storage.get(_storage(p), ())) for p in self.parameters.values())
        key = (id(program), aliases)
        updates = self._plans.get(key)
        if updates is None:
            updates = self._plans[key] = self._updates(program, layout, aliases)
        return updates, self.apply

    def _updates(self, program, layout, aliases) -> Dict[int, list]:
        outputs = program.outputs
        updates: Dict[int, list] = {}
        for (position, _param), alias in zip(self.parameters.items(), aliases):
            slot = outputs[position] if position < len(outputs) else None
            if slot is None or outputs.count(slot) > 1:
                continue
            views, slots = layout.chain(slot)
            besides = set(views)
            point = max([layout.defined.get(slots[0], -1)]
                        + [layout.last_use(s, besides) for s in slots]
                        + [layout.last_use(s) for s in alias])
            updates.setdefault(point, []).append(
                (position, [i for i in views if i > point]))
        return updates

    def apply(self, position: int, gradient) -> None:
        param = self.parameters[position]
        if gradient is None:
            return
        group = self._groups.get(id(param))
        if group is None:
            self._groups = {id(p): g for g in self.optimizer.param_groups for p in g["params"]}
            group = self._groups[id(param)]
        params, groups = group["params"], self.optimizer.param_groups
        group["params"], self.optimizer.param_groups = [param], [group]
        param.grad = gradient
        try:
            self._step(self.optimizer)
        finally:
            group["params"], self.optimizer.param_groups = params, groups
            param.grad = None
        self._on_update()


class LoopWatch:
    """Learns whether the training loop allows updates in the backward, from
    its first iteration (planned with the step at the end), and guards the
    iterations after. `ready()`: the next step may update in the backward."""

    def __init__(self, optimizer: torch.optim.Optimizer, module: torch.nn.Module):
        self.optimizer = optimizer
        self.module = module
        self.refused: Optional[str] = None
        self._clean_steps = 0
        self._backward_seen = False
        self._versions: Dict[int, int] = {}
        self._updated_since_step = False
        self._step_hook = optimizer.register_step_pre_hook(self._on_step)
        self._gradient_hooks = []
        trained = {id(p) for g in optimizer.param_groups for p in g["params"]}
        outside = [n for n, p in module.named_parameters()
                   if p.requires_grad and id(p) not in trained]
        if outside:
            self._refuse(f"parameters that train are not in the optimizer "
                         f"({', '.join(outside[:3])}{', ...' if len(outside) > 3 else ''})")
            return
        for p in module.parameters():
            if p.requires_grad:
                self._gradient_hooks.append(
                    p.register_post_accumulate_grad_hook(self._on_gradient))

    def _refuse(self, reason: str) -> None:
        if self.refused is None:
            self.refused = reason
            warnings.warn(f"echo_torch: no update in the backward: {reason}; the optimizer "
                          f"steps at the end, as planned without it", RuntimeWarning,
                          stacklevel=4)
        self._drop_gradient_hooks()

    def _drop_gradient_hooks(self) -> None:
        for handle in self._gradient_hooks:
            handle.remove()
        self._gradient_hooks = []

    def _on_gradient(self, param) -> None:
        self._backward_seen = True
        self._versions[id(param)] = param.grad._version

    def _on_step(self, *_) -> None:
        self._updated_since_step = False
        if self.refused is not None or self._clean_steps:
            return
        if not self._backward_seen:
            return  # a step without a backward of this model
        changed = [n for n, p in self.module.named_parameters()
                   if p.grad is not None and id(p) in self._versions
                   and p.grad._version != self._versions[id(p)]]
        if changed:
            self._refuse(f"gradients changed between backward and optimizer.step() "
                         f"({changed[0]}: clipping or unscaling reads them all first)")
            return
        self._clean_steps += 1
        self._drop_gradient_hooks()

    def on_training_step(self, gradients_held: bool) -> None:
        """At the start of a training forward: refuses or raises when the
        loop turns out not to allow updates in the backward."""
        if self._updated_since_step:
            raise RuntimeError(
                "echo_torch: a second forward+backward ran before optimizer.step(), but "
                "the last backward already applied the update (update_in_backward=True); "
                "gradient accumulation needs update_in_backward=False")
        if self.refused is not None:
            return
        if gradients_held:
            self._refuse("the step starts with gradients held (accumulation, or "
                         "zero_grad(set_to_none=False))")
        elif self._backward_seen and not self._clean_steps:
            self._refuse("two backwards ran without an optimizer.step() between them")
        elif (torch.distributed.is_available() and torch.distributed.is_initialized()
              and torch.distributed.get_world_size() > 1):
            self._refuse("gradients are reduced across ranks after the backward")

    def ready(self) -> bool:
        return self.refused is None and self._clean_steps > 0

    def updated(self) -> None:
        """An update ran in the backward: the next forward needs a step first."""
        self._updated_since_step = True
