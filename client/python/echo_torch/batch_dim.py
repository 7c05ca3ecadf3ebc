"""The batch dimension of a captured graph (graph.proto: Graph.batch_size,
Tensor.batch_dim), so that echod can rescale the graph to other batches
(FindMaxBatchSize, CheckFit's max batch, the frontier at a batch).

The batch B is the size common to the data inputs (primals with role INPUT
and a shape): the first axis of the first data input whose size every data
input has, so a seq-first model ([seq, batch] tokens, [seq', batch] targets)
finds its batch on the second axis; the leading axis when no size is common.
A batch of 1 is not marked (too ambiguous).

Each tensor then carries the axis the batch lives in and the batch's place
inside it: (axis, inner), where the axis has size outer * B * inner. An
unfolded batch axis is (axis, 1); a flatten of [B, S, d] gives ([B*S, d]
axis 0, inner S), and a seq-first flatten of [S, B, d] gives ([S*B, d], 0,
inner 1). echod needs only the axis (its size k * B scales as k * B'); the
inner factor makes reshapes exact, since a reshape moves the batch by its
row-major stride (inner * the sizes of the later axes).

Propagation, over the ops in order, per output tensor (parameters,
optimizer state and returned gradients are never marked):
  - reshapes (view, _unsafe_view, reshape, squeeze, unsqueeze, flatten,
    unflatten): by the batch's row-major stride, exact;
  - permute, transpose, t, expand, stack, select, unbind, mm, addmm, bmm:
    by their axes (a batch in a matmul's contracted axis leaves none); a
    batch norm's per-channel statistics: none;
  - other ops reading a marked tensor: the output's axis whose size is a
    marked input's batch axis size (that input's axis index first), the
    input's inner factor kept; an op that reduces over the batch gets none;
  - select_backward, slice_backward: the gradient's axis, shifted past
    the re-inserted one;
  - tensors no marked tensor reaches (placeholders, factories such as
    zeros([layers, B, h]), an expand of the loss's gradient): the mark of an
    already marked tensor of the same shape, else the first axis of size B
    (over-marking predicts too large a peak at a larger batch, the safe
    side; missing a batch axis predicts too small a one).
Tangents (the backward's seeds) are matched by shape against the forward's
marks, and the ops are walked again with them. A heuristic, not symbolic
shapes: where an axis equals a batch axis by coincidence in a generic op, it
is marked too.
"""
from typing import Dict, Optional, Sequence, Tuple

from echo_torch import ops
from echo_torch import proto

_pb = proto.graph_pb2

_UNBATCHED_ROLES = (_pb.TENSOR_ROLE_PARAMETER, _pb.TENSOR_ROLE_OPTIMIZER_STATE,
                    _pb.TENSOR_ROLE_GRADIENT)
_RESHAPES = frozenset(("view", "_unsafe_view", "reshape", "squeeze", "unsqueeze",
                       "flatten", "unflatten", "view_as", "_reshape_alias"))

_MATMULS = frozenset(("mm", "addmm", "bmm"))

Mark = Tuple[int, int]  # (axis, inner)


def _prod(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _batch_of(data_inputs) -> int:
    if not data_inputs:
        return 0
    first = [int(d) for d in data_inputs[0].shape]
    common = [d for d in first
              if all(d in [int(x) for x in t.shape] for t in data_inputs[1:])]
    return common[0] if common else first[0]


def _axis(value, rank) -> Optional[int]:
    if not isinstance(value, int) or rank == 0:
        return None
    return value + rank if value < 0 else value


def _reshaped(src_shape, mark: Mark, out_shape, batch) -> Optional[Mark]:
    """The batch's axis in a reshape of src_shape to out_shape: the axis
    that holds the batch's whole row-major stride range."""
    axis, inner = mark
    stride = inner * _prod(src_shape[axis + 1:])
    later = 1  # product of out_shape[j + 1:]
    for j in range(len(out_shape) - 1, -1, -1):
        size = int(out_shape[j])
        if stride >= later * size:  # the batch starts in an outer axis
            later *= size
            continue
        if stride % later or stride * batch > later * size:
            return None  # the batch is split across axes
        new_inner = stride // later
        return (j, new_inner) if size % (new_inner * batch) == 0 else None
    return None


class _Walk:
    def __init__(self, batch, by_id, tensor_of):
        self.batch = batch
        self.by_id = by_id
        self.tensor_of = tensor_of
        self.marks: Dict[str, Mark] = {}
        self.shapes: Dict[Tuple[int, ...], Mark] = {}

    def mark(self, tid, mark: Optional[Mark]):
        if mark is None:
            return
        self.marks[tid] = mark
        self.shapes.setdefault(tuple(int(d) for d in self.by_id[tid].shape), mark)

    def by_shape(self, t) -> Optional[Mark]:
        dims = tuple(int(d) for d in t.shape)
        mark = self.shapes.get(dims)
        if mark is not None:
            return mark
        # The first axis of size B: a recurrent layer's initial state is
        # zeros([layers, B, hidden]). Marking too much errs on the safe side
        # (a larger predicted peak); missing a batch axis predicts too little.
        return (dims.index(self.batch), 1) if self.batch in dims else None

    def source(self, node, index=0):
        """The (tensor, mark) of node.args[index] when it is marked."""
        if index >= len(node.args):
            return None, None
        tid = self.tensor_of.get(node.args[index])
        if tid is None or tid not in self.marks:
            return None, None
        return self.by_id[tid], self.marks[tid]

    def structural(self, name, node, out) -> Tuple[bool, Optional[Mark]]:
        """(handled, mark) for ops whose axis mapping is known."""
        args = node.args
        if name == "stack":
            inputs = args[0] if args else []
            tid = next((self.tensor_of.get(a) for a in inputs
                        if self.tensor_of.get(a) in self.marks), None)
            if tid is None:
                return True, None
            axis, inner = self.marks[tid]
            dim = _axis(args[1] if len(args) > 1 else 0, len(out.shape))
            return True, (axis + 1 if dim is not None and dim <= axis else axis, inner)
        if name in _MATMULS:
            return True, self.matmul(name, node)
        if "batch_norm" in name and len(out.shape) == 1:
            return True, None  # per-channel statistics
        src, mark = self.source(node)
        if name in ("select_backward", "slice_backward"):
            # (grad, input_sizes, dim, ...): the grad placed in a tensor of
            # the input's sizes; select_backward re-inserts the axis dim.
            if src is None:
                return True, None
            axis, inner = mark
            dim = _axis(args[2], len(out.shape)) if len(args) > 2 else None
            if name == "select_backward" and dim is not None and dim <= axis:
                axis += 1
            return True, (axis, inner)
        if name not in _RESHAPES and name not in (
                "permute", "transpose", "t", "expand", "select", "unbind"):
            return False, None
        if src is None:
            # An expand of an unmarked tensor (the loss's gradient expanded
            # to [B, ...]) makes its sizes from scratch, like a factory.
            return (False, None) if name == "expand" else (True, None)
        axis, inner = mark
        rank = len(src.shape)
        if name in _RESHAPES:
            return True, _reshaped([int(d) for d in src.shape], mark,
                                   [int(d) for d in out.shape], self.batch)
        if name == "permute":
            dims = [_axis(d, rank) for d in args[1]] if len(args) > 1 else []
            return True, ((dims.index(axis), inner) if axis in dims else None)
        if name in ("transpose", "t"):
            if rank < 2:
                return True, mark
            a, b = ((0, 1) if name == "t" else
                    (_axis(args[1], rank), _axis(args[2], rank)))
            return True, ((b if axis == a else a if axis == b else axis), inner)
        if name == "expand":
            return True, (axis + len(out.shape) - rank, inner)
        # select, unbind: the axis is removed.
        dim = _axis(args[1] if len(args) > 1 else 0, rank)
        if dim is None or dim == axis:
            return True, None
        return True, (axis - 1 if dim < axis else axis, inner)

    def matmul(self, name, node) -> Optional[Mark]:
        """mm/addmm: [n, k] @ [k, m] -> [n, m]; bmm: [b, n, k] @ [b, k, m]
        -> [b, n, m]. A batch in a contracted axis leaves none."""
        first = 1 if name == "addmm" else 0
        a_src, a_mark = self.source(node, first)
        b_src, b_mark = self.source(node, first + 1)
        lead = 1 if name == "bmm" else 0  # the shared axis of bmm
        if a_mark is not None and a_mark[0] <= lead:
            return a_mark
        if b_mark is not None and b_mark[0] == lead + 1:
            return b_mark
        if b_mark is not None and name == "bmm" and b_mark[0] == 0:
            return b_mark
        return None

    def generic(self, sources, out) -> Optional[Mark]:
        dims = [int(d) for d in out.shape]
        best = None
        for src, (axis, inner) in sources:
            size = int(src.shape[axis])
            if axis < len(dims) and dims[axis] == size:
                return axis, inner
            if best is None:
                hit = next((j for j, d in enumerate(dims) if d == size), None)
                if hit is not None:
                    best = (hit, inner)
        return best

    def run(self, steps, seeds: Dict[str, Mark]):
        self.marks, self.shapes = {}, {}
        for tid, mark in seeds.items():
            self.mark(tid, mark)
        for op, node in steps:
            name = ops.base_name(node.target)
            sources = [(self.by_id[i], self.marks[i]) for i in op.input_ids
                       if i in self.marks]
            for tid in op.output_ids:
                out = self.by_id.get(tid)
                if out is None or out.role in _UNBATCHED_ROLES or not len(out.shape):
                    continue
                handled, mark = self.structural(name, node, out)
                if not handled:
                    mark = (self.generic(sources, out) if sources
                            else self.by_shape(out))
                self.mark(tid, mark)
        return self.marks


def mark_batch_dim(graph, tensors, steps: Sequence, tensor_of, primal_ids) -> int:
    """Marks graph.batch_size and each tensor's batch_dim (module doc).
    `steps` pairs each op proto with its FX node, in order; tensor_of maps
    FX nodes to tensor ids. Returns the batch, 0 when none."""
    by_id = {t.id: t for t in tensors}
    data = [by_id[t] for t in primal_ids if t in by_id and
            by_id[t].role == _pb.TENSOR_ROLE_INPUT and len(by_id[t].shape)]
    batch = _batch_of(data)
    if batch <= 1:
        return 0
    graph.batch_size = batch
    first = {t.id: ([int(d) for d in t.shape].index(batch), 1) for t in data
             if batch in [int(d) for d in t.shape]}
    walk = _Walk(batch, by_id, tensor_of)
    walk.run(steps, first)
    # Tangents take the marks of the forward's shapes, then walk again.
    produced = {tid for op, _ in steps for tid in op.output_ids}
    primals = set(primal_ids)
    seeds = dict(first)
    for t in tensors:
        if (t.id in produced or t.id in primals or t.role in _UNBATCHED_ROLES
                or not len(t.shape)):
            continue
        mark = walk.by_shape(t)
        if mark is not None:
            seeds[t.id] = mark
    marks = walk.run(steps, seeds)
    for tid, (axis, _) in marks.items():
        size = int(by_id[tid].shape[axis])
        if size > 0 and size % batch == 0:  # what echod validates
            by_id[tid].batch_dim = axis
    return batch
