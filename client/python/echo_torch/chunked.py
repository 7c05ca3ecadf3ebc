"""Runs a chunked region of a plan (docs/design.md, "Plan actions").

echod names a region of the captured graph (its forward and backward ops)
that maps row i of its inputs to row i of its tensors: a language model's
output projection, log-softmax and NLL loss, and their backward. The plan
replaces it by two steps:

- the forward step runs the region's own aten ops on row slices, one chunk
  after another, forward then backward, at the loss's gradient 1: only a
  chunk of the [rows, vocab] tensors exists at a time. Gradients leave the
  region summed over the chunks (a matmul of the transposed rows, a sum over
  the rows) or written slice by slice;
- the backward step scales those gradients in place by the loss's gradient
  (the loss is a scalar, so every gradient is linear in it).

Each op runs on a chunk as it ran on the whole; what changes is only what
the rows decide: views and (log-)softmax axes are taken on the chunk's
shape, the NLL loss sums its chunk and divides by the whole batch's total
weight (its mean), which its backward receives too. Chunked sums add in
another order than one matmul or one reduction: results agree with the
unchunked ops to fp32 rounding, not bit for bit.
"""
import dataclasses
import math
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.fx as fx

from echo_torch import ops, proto
from echo_torch.executor import _to_plain
from echo_torch.programs import _map_leaves

_aten = torch.ops.aten
_ELEMENTWISE = proto.graph_pb2.OP_CLASS_ELEMENTWISE

_RESHAPES = {"view", "_unsafe_view", "reshape", "_reshape_alias"}
_SOFTMAX_AXIS = {"_log_softmax": 1, "_softmax": 1,
                 "_log_softmax_backward_data": 2, "_softmax_backward_data": 2}


class ChunkError(ValueError):
    """The region cannot be run in chunks as the plan says."""


@dataclasses.dataclass(frozen=True)
class _Ref:
    tid: str


def _row_prefix(shape: Sequence[int], rows: int) -> int:
    """Leading axes whose product is `rows` (0: none)."""
    product = 1
    for i, d in enumerate(shape):
        product *= d
        if product == rows:
            return i + 1
        if product <= 0 or product > rows:
            return 0
    return 0


@dataclasses.dataclass
class _Tensor:
    shape: tuple
    dtype: Any
    prefix: int  # row axes leading (0: not rows first)
    rows_last: bool  # a transposed [X, rows] matrix

    def chunk_shape(self, n: int) -> tuple:
        if self.prefix:
            return (n,) + self.shape[self.prefix:]
        if self.rows_last:
            return (self.shape[0], n)
        return self.shape


@dataclasses.dataclass
class _Step:
    node: fx.Node
    # "op", "reshape", "softmax", "nll", "nll_backward"; "stack" (joins the
    # steps' blocks), "select" (takes one block of the rows), "between_sums"
    # (a view or add of sums: never run, its sums add into the gradient).
    kind: str
    args: Any
    kwargs: Any
    outputs: List[Optional[str]]
    frees: List[str]
    # How each output that leaves the region is made: "sum" (summed over
    # chunks), "rows" (written slice by slice), "mm_rows" (a matmul written
    # into its slice), "block" (a block's op: its result as it is).
    leaves: Dict[str, str]
    elementwise: bool = False
    # A block's op: the block's first row (it runs once, on the block whole,
    # in the chunk that holds it); None: on every chunk.
    block: Optional[int] = None
    # A sum over the rows: the gradient it adds into, and the views and
    # adds between (their steps, in order).
    sum_into: Optional[tuple] = None


class RegionRunner:
    """One chunked region of a plan, built from the converted graph and the
    plan's ChunkedRegion message."""

    def __init__(self, converted, region):
        self.region = region
        self.name = region.forward_step_op_id
        self.rows = int(region.rows)
        self.chunks = max(1, int(region.chunks))
        self.chunk_rows = int(region.chunk_rows) or math.ceil(self.rows / self.chunks)
        self.inputs = list(region.input_tensor_ids)
        self.sliced = set(region.sliced_input_tensor_ids)
        self.loss_outputs = list(region.loss_output_tensor_ids)
        self.gradients = list(region.gradient_tensor_ids)
        self.loss_gradient = region.loss_gradient_tensor_id
        self.given_whole = set(self.inputs) - self.sliced
        # Gradients of other outputs planned as never sent: zero here.
        self.zero_inputs = list(region.zero_input_tensor_ids)
        self.block_rows = int(region.block_rows)
        self.block_of = {b.op_id: int(b.first_row) for b in region.block_ops}
        self.summed = set(region.summed_tensor_ids)
        if self.block_rows and self.chunk_rows % self.block_rows:
            raise ChunkError(f"chunked region {self.name}: chunks of {self.chunk_rows} "
                             f"rows split its blocks of {self.block_rows}")
        self.tensors = self._tensors(converted)
        op_ids = list(region.forward_op_ids) + list(region.backward_op_ids)
        missing = [i for i in op_ids if i not in converted.op_index]
        if missing:
            raise ChunkError(f"chunked region {self.name} names unknown ops {missing[:3]}")
        self.op_indices = [converted.op_index[i] for i in op_ids]
        self.steps = self._steps(converted, op_ids)
        self.loss_op = next((s for s in self.steps if s.kind == "nll"), None)
        if self.loss_op is None:
            raise ChunkError(f"chunked region {self.name} has no nll_loss_forward")

    # ------------------------------------------------------------ building

    def _tensors(self, converted) -> Dict[str, _Tensor]:
        out = {}
        # A [rows, rows] transpose of the rows reads as rows first by its
        # shape: echod names those that are rows last.
        marked = set(self.region.rows_last_tensor_ids)
        for t in converted.graph.tensors:
            shape = tuple(int(d) for d in t.shape)
            rows_last = len(shape) == 2 and shape[1] == self.rows and (
                shape[0] != self.rows or t.id in marked)
            out[t.id] = _Tensor(shape, None,
                                0 if rows_last else _row_prefix(shape, self.rows), rows_last)
        for node, tid in converted.tensor_of.items():
            val = node.meta.get("val")
            if tid in out and isinstance(val, torch.Tensor):
                out[tid].dtype = val.dtype
        return out

    def _steps(self, converted, op_ids) -> List[_Step]:
        steps = []
        leaving = set(self.gradients) | set(self.loss_outputs)
        last_read: Dict[str, int] = {}
        for i, op_id in enumerate(op_ids):
            info = converted.ops[converted.op_index[op_id]]
            node = info.node

            def ref(n):
                tid = converted.tensor_of.get(n)
                if tid is None:
                    if n.op == "get_attr":
                        return getattr(converted.joint.module, n.target)
                    raise ChunkError(f"{node.name} reads {n.name}, which has no tensor")
                last_read[tid] = i
                return _Ref(tid)

            args = fx.node.map_arg(node.args, ref)
            kwargs = fx.node.map_arg(node.kwargs, ref)
            name = ops.base_name(node.target)
            block = self.block_of.get(op_id)
            summed = bool(info.outputs) and info.outputs[0] in self.summed
            if summed and name not in ("mm", "sum"):
                kind = "between_sums"
            elif block is not None:
                # On the block whole: as the op ran on it, save a select of it.
                kind = "select" if name == "select" else "op"
            else:
                kind = ("nll" if name == "nll_loss_forward" else
                        "nll_backward" if name == "nll_loss_backward" else
                        "stack" if name == "stack" else
                        "reshape" if name in _RESHAPES else
                        "softmax" if name in _SOFTMAX_AXIS else "op")
            leaves = {t: self._leave_kind(name, args, t, block) for t in info.outputs
                      if t is not None and t in leaving and t in self.gradients}
            if summed and name in ("mm", "sum"):
                leaves[info.outputs[0]] = "sum"  # inside too: into its gradient
            steps.append(_Step(node, kind, _to_plain(args), _to_plain(kwargs),
                               list(info.outputs), [], leaves,
                               ops.op_class(node.target) == _ELEMENTWISE, block))
        self._route_sums(steps)
        # Each chunk value dies after its last reader in the region (or at
        # once, when none reads it): what the plan's workspace counts.
        made_at = {t: i for i, step in enumerate(steps) for t in step.outputs if t is not None}
        for tid, i in made_at.items():
            steps[max(i, last_read.get(tid, i))].frees.append(tid)
        return steps

    def _route_sums(self, steps):
        """Each sum over the rows: the gradient it ends in, through the views
        and adds of sums after it."""
        reader = {}
        for step in steps:
            if step.kind == "between_sums":
                for leaf in _leaves(step.args):
                    reader[leaf.tid] = step
        for step in steps:
            out = step.outputs[0] if step.outputs else None
            if step.kind == "between_sums" or step.leaves.get(out) != "sum":
                continue
            path, tid = [], out
            while tid not in self.gradients:
                if tid not in reader:
                    raise ChunkError(f"the sum {out} of {self.name} reaches no gradient")
                path.append(reader[tid])
                tid = reader[tid].outputs[0]
            step.sum_into = (tid, path)

    def _leave_kind(self, name, args, tid, block) -> str:
        if tid in self.summed:
            return "sum"
        if block is not None:
            return "block"
        if name == "mm" and isinstance(args[0], _Ref):
            first = self.tensors[args[0].tid]
            if first.rows_last:
                return "sum"
            if self.tensors[tid].prefix:
                return "mm_rows"
        if name == "sum" and not self.tensors[tid].prefix:
            return "sum"
        if not self.tensors[tid].prefix:
            raise ChunkError(f"gradient {tid} of {self.name} is neither summed nor by rows")
        return "rows"

    # ------------------------------------------------------------ running

    def forward(self, *values):
        """The region's forward step: its loss outputs, then its gradients
        at the loss's gradient 1."""
        given = dict(zip(self.inputs, values))
        device = next((v.device for v in values if isinstance(v, torch.Tensor)), None)
        total_weight = self._total_weight(given)
        for tid in self.zero_inputs:
            given[tid] = None
        # The backward runs at the loss's gradient 1 (scaled in its step).
        given[self.loss_gradient] = torch.ones((), dtype=total_weight.dtype,
                                               device=total_weight.device)
        grads = {t: None for t in self.gradients}
        loss_sum = None
        with torch.no_grad():
            for start in range(0, self.rows, self.chunk_rows):
                stop = min(self.rows, start + self.chunk_rows)
                env = {t: self._slice(t, v, start, stop) for t, v in given.items()}
                part = self._run_chunk(env, grads, start, stop, total_weight, device)
                loss_sum = part if loss_sum is None else loss_sum + part
                del env
        # Row-written gradients were filled as [rows, ...].
        return self._loss_values(loss_sum, total_weight) + [
            None if grads[t] is None else grads[t].reshape(self.tensors[t].shape)
            for t in self.gradients]

    def backward(self, loss_gradient, *gradients):
        """The region's backward step: the gradients times the loss's
        gradient, in place (a gradient of another output that the region
        took as zero is refused by the backward program, executor.py)."""
        with torch.no_grad():
            for g in gradients:
                if g is not None:
                    g.mul_(loss_gradient.to(g.dtype))
        return None

    def _slice(self, tid, value, start, stop):
        if tid not in self.sliced or not isinstance(value, torch.Tensor):
            return value
        info = self.tensors[tid]
        return value.reshape((self.rows,) + info.shape[info.prefix:])[start:stop]

    def _total_weight(self, given):
        """The NLL loss's total weight over every row (its mean's divisor),
        as nll_loss_forward computes it."""
        args = self.loss_op.args
        target = _fill(args[1], given)
        weight = _fill(args[2], given) if len(args) > 2 else None
        ignore_index = args[4] if len(args) > 4 else -100
        logp = self.tensors[args[0].tid]
        valid = target != ignore_index
        if weight is None:
            return valid.sum().to(logp.dtype)
        return (weight[target.clamp(min=0)] * valid).sum().to(logp.dtype)

    def _loss_values(self, loss_sum, total_weight):
        reduction = self.loss_op.args[3]
        loss = loss_sum / total_weight if reduction == 1 else loss_sum
        values = []
        for tid in self.loss_outputs:
            position = self.loss_op.outputs.index(tid)
            values.append(loss if position == 0 else total_weight)
        return values

    def output_infos(self) -> List[_Tensor]:
        """The forward step's outputs: loss outputs, then gradients."""
        return [self.tensors[t] for t in self.loss_outputs + self.gradients]

    def _run_chunk(self, env, grads, start, stop, total_weight, device):
        n = stop - start
        loss_part = None
        for step in self.steps:
            if step.kind == "between_sums" or (
                    step.block is not None and not start <= step.block < stop):
                continue  # never run, or another chunk's block
            if step.kind == "stack":
                # The chunk's blocks, in order (each block_rows rows).
                parts = [env[ref.tid] for k, ref in enumerate(step.args[0])
                         if start <= k * self.block_rows < stop]
                result = torch.stack(parts).reshape(
                    self.tensors[step.outputs[0]].chunk_shape(n))
                del parts
                self._bind(step, result, env, grads, start, stop)
                del result
                for tid in step.frees:
                    env.pop(tid, None)
                continue
            args = _fill(step.args, env)
            kwargs = _fill(step.kwargs, env)
            if step.kind == "select":
                # The block's rows of the chunk's rows.
                rows = self.tensors[step.args[0].tid]
                first = step.block - start
                result = args[0].reshape((n,) + rows.shape[rows.prefix:])[
                    first:first + self.block_rows].reshape(self.tensors[step.outputs[0]].shape)
            elif step.block is not None and step.sum_into is None:
                result = step.node.target(*args, **kwargs)
            elif step.kind == "nll":
                # The chunk's sum; the mean divides by the whole batch's weight.
                result = list(_aten.nll_loss_forward(args[0], args[1], args[2], 2, args[4]))
                loss_part = result[0]
                result[1] = total_weight
            elif step.kind == "nll_backward":
                result = _aten.nll_loss_backward(*args[:6], total_weight)
            elif step.kind == "reshape":
                out = self.tensors[step.outputs[0]]
                result = args[0].reshape(out.chunk_shape(n))
            elif step.kind == "softmax":
                args = list(args)
                axis = _SOFTMAX_AXIS[ops.base_name(step.node.target)]
                rank = len(self.tensors[step.outputs[0]].shape)
                dim = args[axis]
                args[axis] = dim - rank if dim >= 0 else dim
                result = step.node.target(*args, **kwargs)
            elif step.leaves and self._accumulate(step, args, grads, start, stop):
                result = None  # written into its gradient
            elif any(a is None for a in args) and ops.zero_add_operand(
                    step.node.target, args, kwargs, lambda a: a is None) is not None:
                # An add of a never-sent gradient: the other operand.
                result = args[ops.zero_add_operand(step.node.target, args, kwargs,
                                                   lambda a: a is None)]
            else:
                args = [self._broadcast(a, template, step)
                        for a, template in zip(args, step.args)]
                result = step.node.target(*args, **kwargs)
            if result is not None:
                self._bind(step, result, env, grads, start, stop)
            del args, kwargs, result
            for tid in step.frees:
                env.pop(tid, None)
        return loss_part

    def _broadcast(self, value, template, step):
        """A whole operand broadcast over the rows: without the row axes it
        spans (they are 1), so it broadcasts over the chunk's one row axis."""
        whole = (step.elementwise and isinstance(template, _Ref)
                 and template.tid in self.given_whole)
        if not whole or not isinstance(value, torch.Tensor) or step.outputs[0] is None:
            return value
        out = self.tensors[step.outputs[0]]
        if not out.prefix or value.dim() <= len(out.shape) - out.prefix:
            return value
        keep = len(out.shape) - out.prefix
        return value.reshape(value.shape[value.dim() - keep:]) if keep else value.reshape(())

    def _accumulate(self, step, args, grads, start, stop) -> bool:
        """Gradient-leaving matmuls and sums, written into their gradient."""
        tid = step.outputs[0]
        kind = step.leaves.get(tid)
        name = ops.base_name(step.node.target)
        if step.sum_into is not None and (step.sum_into[1] or step.block is not None):
            self._add_into(step, args, grads)
            return True
        # Summed in place in the gradient's own dtype: no chunk-sized
        # partial and no wider accumulator, as the plan's memory says (in
        # bf16 the sum rounds once per chunk).
        if kind == "sum" and name == "mm":
            if grads[tid] is None:
                grads[tid] = torch.mm(args[0], args[1])
            else:
                grads[tid].addmm_(args[0], args[1])
            return True
        if kind == "sum" and name == "sum":
            # Over the rows: the chunk's one row axis.
            part = args[0].sum(0).reshape(self.tensors[tid].shape)
            grads[tid] = part if grads[tid] is None else grads[tid].add_(part)
            return True
        if kind == "mm_rows" and name == "mm":
            buffer = self._buffer(tid, grads, args[0])
            torch.mm(args[0], args[1], out=buffer[start:stop])
            return True
        return False

    def _add_into(self, step, args, grads):
        """A sum's share, added into the gradient it ends in, seen through
        the views between (in reverse), so no partial is made for a matmul."""
        target, path = step.sum_into
        if grads[target] is None:
            info = self.tensors[target]
            grads[target] = torch.zeros(info.shape, dtype=info.dtype or args[0].dtype,
                                        device=args[0].device)
        view = grads[target]
        for between in reversed(path):
            name = ops.base_name(between.node.target)
            if name == "t" or (name == "permute" and list(between.args[1]) == [1, 0]):
                view = view.t()
            elif name != "add":
                view = view.view(self.tensors[_leaves(between.args)[0].tid].shape)
        if ops.base_name(step.node.target) == "mm":
            view.addmm_(args[0], args[1])
        elif step.block is not None:
            view.add_(step.node.target(*args, **_fill(step.kwargs, {})).reshape(view.shape))
        else:
            # Over the rows: the chunk's one row axis.
            view.add_(args[0].sum(0).reshape(view.shape))

    def _buffer(self, tid, grads, like):
        if grads[tid] is None:
            info = self.tensors[tid]
            grads[tid] = torch.empty((self.rows,) + info.shape[info.prefix:],
                                     dtype=info.dtype or like.dtype, device=like.device)
        return grads[tid]

    def _bind(self, step, result, env, grads, start, stop):
        outs = step.outputs
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        for tid, value in zip(outs, values):
            if tid is None:
                continue
            if step.leaves.get(tid) == "rows":
                self._buffer(tid, grads, value)[start:stop].copy_(value)
            elif step.leaves.get(tid) == "block":
                grads[tid] = value
            env[tid] = value


def _leaves(template) -> List[_Ref]:
    found = []
    _map_leaves(template, lambda leaf: found.append(leaf) if isinstance(leaf, _Ref) else None)
    return found


def _fill(template, env):
    return _map_leaves(template, lambda leaf: env[leaf.tid] if isinstance(leaf, _Ref) else leaf)
