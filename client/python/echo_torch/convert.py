"""Joint forward+backward FX graph -> echo.v1.Graph.

One echo op per call_function node (getitem nodes are not ops: they name an
output of their producer), in the joint graph's order. One echo tensor per
placeholder, constant and op output.

Views. An op whose output aliases an input (view, t, expand, detach,
_unsafe_view, split...) allocates nothing: its outputs get size_bytes 0. The
bytes stay with the *storage base*, the nearest tensor up the view chain that
owns memory. A view is only readable while its base is alive, so every op that
reads a view also gets the view's base as an extra input (after its real
inputs). Liveness in the planner then keeps the base alive exactly as long as
some view of it is read, and the base is a stash candidate when a backward op
reads one of its views. The executor (executor.py) never saves a view across
the forward/backward boundary: it saves the base and re-applies the view ops
in the backward, so the planner's bytes and the real bytes agree.

In-place ops (bernoulli_ in the dropout decomposition) return their written
input. Their output is modelled as an owner of full size; when the written
input is a fresh buffer (empty_like) read by nothing else, that buffer is 0
bytes, so the storage is counted once.

Phases. Ops up to the last one a forward output needs are FORWARD, the rest
BACKWARD: that is where the default partition runs them (nodes that only the
backward needs and that autograd traced after the forward stay in the
backward).

Lifetimes the framework imposes: forward outputs and the batch (the
model's tensor arguments) are held by the caller, and tangents by the
autograd engine, through the whole backward, so all three are is_output
(live to the end). Parameter gradients are is_output with role
GRADIENT.
"""
import collections
import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from echo_torch import ops, proto
from echo_torch.batch_dim import mark_batch_dim
from echo_torch.tensor_meta import (DTYPES, meta_of_value, node_meta, output_metas, shape_of,
                                    storage_bytes)

_pb = proto.graph_pb2

ROLE_PARAMETER = "parameter"
ROLE_BUFFER = "buffer"
ROLE_INPUT = "input"

# Longest "args" attribute sent (echod takes attribute values up to 4096
# bytes).
_MAX_ARGS_CHARS = 4000


@dataclasses.dataclass
class PrimalInfo:
    """What a primal placeholder of the joint graph is."""
    kind: str  # ROLE_PARAMETER, ROLE_BUFFER or ROLE_INPUT
    name: str


@dataclasses.dataclass
class JointGraph:
    """A captured joint graph and what the capture layer knows about it."""
    module: fx.GraphModule
    num_fwd_outputs: int
    primals: List[PrimalInfo]
    name: str = "model"
    metadata: Dict[str, str] = dataclasses.field(default_factory=dict)
    # (primals, tangents) the graph was traced with (fake tensors).
    example_inputs: Any = None
    # The backward runs without the gradients of unused outputs (autograd
    # sends None, executor.without_inputs): the graph may assume them absent.
    tangents_may_be_missing: bool = False
    # The ShapeFamily this graph is one size of (shape_family.py), or None.
    family: Any = None


@dataclasses.dataclass
class OpInfo:
    node: fx.Node
    outputs: List[Optional[str]]  # tensor id per output position
    is_view: bool
    multi_output: bool
    written_args: Tuple[int, ...]
    phase: int


@dataclasses.dataclass
class ConvertedGraph:
    """The echo graph plus the mapping back to the FX graph."""
    joint: JointGraph
    graph: "_pb.Graph"
    ops: List[OpInfo]
    op_index: Dict[str, int]
    # Tensor id of a value node (placeholder, get_attr, single-output op,
    # getitem of a multi-output op).
    tensor_of: Dict[fx.Node, str]
    # Producing op index and output position of each op-produced tensor.
    producer: Dict[str, Tuple[int, int]]
    size_bytes: Dict[str, int]
    # Storage bases of view tensors (empty for owners).
    view_bases: Dict[str, List[str]]
    primal_nodes: List[fx.Node]
    tangent_nodes: List[fx.Node]
    fwd_outputs: List[Optional[fx.Node]]
    bwd_outputs: List[Optional[fx.Node]]
    first_backward_op: int
    # Tangents (tensor ids) the graph assumes autograd does not send
    # (assumed_unused_tangents).
    unused_tangents: List[str] = dataclasses.field(default_factory=list)

    def stash_candidate_bytes(self) -> int:
        """Bytes of forward activations that backward ops read: what the
        framework's default partition saves."""
        readers = _readers(self.graph)
        total = 0
        for tensor in self.graph.tensors:
            if tensor.id not in self.producer:
                continue
            if self.ops[self.producer[tensor.id][0]].phase != _pb.PHASE_FORWARD:
                continue
            if any(self.ops[self.op_index[r]].phase == _pb.PHASE_BACKWARD
                   for r in readers.get(tensor.id, ())):
                total += self.size_bytes[tensor.id]
        return total


def _readers(graph):
    readers = {}
    for op in graph.ops:
        for t in op.input_ids:
            readers.setdefault(t, []).append(op.id)
    return readers


def _flat_nodes(args) -> List[fx.Node]:
    return [a for a in pytree.tree_flatten(args)[0] if isinstance(a, fx.Node)]


def storage_of(view_bases: Dict[str, List[str]], tid: Optional[str]) -> Optional[str]:
    """The tensor that owns `tid`'s bytes: itself, or the single storage
    base of a view (where a gradient that is a view is named, and where its
    update frees bytes)."""
    bases = view_bases.get(tid) if tid is not None else None
    return bases[0] if bases and len(bases) == 1 else tid


def _output_lists(joint: JointGraph):
    (output_node,) = [n for n in joint.module.graph.nodes if n.op == "output"]
    flat = pytree.tree_flatten(output_node.args)[0]
    return flat[:joint.num_fwd_outputs], flat[joint.num_fwd_outputs:]


def _ancestors(nodes) -> set:
    seen, stack = set(), [n for n in nodes if isinstance(n, fx.Node)]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(node.all_input_nodes)
    return seen


def _same_meta(a, b) -> bool:
    """Same shape, dtype and strides (so the sum may be the operand itself;
    executor.without_inputs checks the same)."""
    ma = node_meta(a)
    return ma is not None and ma == node_meta(b)


def _zero_add_operand(node, zero) -> Optional[fx.Node]:
    """The operand an add of a zero tangent equals (ops.zero_add_operand)."""
    pos = ops.zero_add_operand(node.target, node.args, node.kwargs, lambda a: a in zero)
    other = node.args[pos] if pos is not None else None
    return other if isinstance(other, fx.Node) and _same_meta(other, node) else None


def assumed_unused_tangents(joint: JointGraph, tangent_nodes) -> List[fx.Node]:
    """The gradients a step is planned without: beside a scalar loss (a
    tangent of one element), the tangents of the other outputs (Hugging
    Face's logits beside its loss; eager autograd never makes them, since
    only the loss is differentiated), when each is only added to another
    gradient of the same tensor (so the sum is that gradient) and the
    backward runs without them (JointGraph.tangents_may_be_missing). A
    gradient that does come anyway is used, with a warning (executor)."""
    if not joint.tangents_may_be_missing:
        return []
    metas = {n: node_meta(n) for n in tangent_nodes}
    if not any(m is not None and _numel(m.shape) == 1 and m.dtype.is_floating_point
               for m in metas.values()):
        return []
    unused = [n for n, m in metas.items() if m is not None and _numel(m.shape) > 1]
    return [n for n in unused if n.users and
            all(_zero_add_operand(u, {n}) is not None for u in n.users)]


def _numel(shape) -> int:
    count = 1
    for d in shape:
        count *= int(d)
    return count


def convert(joint: JointGraph) -> ConvertedGraph:
    """The joint graph as an echo.v1.Graph, with the mapping back."""
    return _Converter(joint).run()


def _first_backward_op(gm, call_nodes, fwd_outputs) -> int:
    """Index into call_nodes of the first backward op: the one after the
    last op a forward output needs. Raises if a forward op reads a
    tangent."""
    needed = _ancestors(fwd_outputs)
    last_fwd = max((i for i, n in enumerate(call_nodes) if n in needed), default=-1)
    from_tangents = set()
    for n in gm.graph.nodes:
        if ops.is_tangent(n) or any(a in from_tangents for a in n.all_input_nodes):
            from_tangents.add(n)
    for n in call_nodes[:last_fwd + 1]:
        if n in from_tangents:
            raise ValueError(f"forward op {n.name} depends on a tangent")
    return last_fwd + 1


class _Converter:
    """One conversion: placeholders, then ops in graph order, then in-place
    writes and outputs; the dicts are what ConvertedGraph hands on."""

    def __init__(self, joint: JointGraph):
        self.joint = joint
        self.gm = joint.module
        self.graph = _pb.Graph(name=joint.name)
        self.tensors: Dict[str, "_pb.Tensor"] = {}
        self.order: List[str] = []
        self.tensor_of: Dict[fx.Node, str] = {}
        self.size_bytes: Dict[str, int] = {}
        self.view_bases: Dict[str, List[str]] = {}
        self.producer: Dict[str, Tuple[int, int]] = {}
        self.op_infos: List[OpInfo] = []
        self.op_protos: List["_pb.Op"] = []
        self.primal_nodes: List[fx.Node] = []
        self.tangent_nodes: List[fx.Node] = []
        self.unused: set = set()

    def run(self) -> ConvertedGraph:
        joint, graph = self.joint, self.graph
        graph.metadata["framework"] = "pytorch"
        graph.metadata["torch_version"] = torch.__version__
        graph.metadata.update(joint.metadata)
        fwd_outputs, bwd_outputs = _output_lists(joint)
        fwd_outputs = [n if isinstance(n, fx.Node) else None for n in fwd_outputs]
        bwd_outputs = [n if isinstance(n, fx.Node) else None for n in bwd_outputs]
        graph.metadata["num_forward_outputs"] = str(len(fwd_outputs))

        self.add_placeholders()
        call_nodes = [n for n in self.gm.graph.nodes
                      if n.op == "call_function" and not ops.is_getitem(n.target)]
        first_backward_op = _first_backward_op(self.gm, call_nodes, fwd_outputs)
        for index, node in enumerate(call_nodes):
            phase = _pb.PHASE_FORWARD if index < first_backward_op else _pb.PHASE_BACKWARD
            self.add_op(index, node, phase)
        self.count_in_place_writes()
        # Outputs: forward outputs held by the caller, gradients returned.
        for node in fwd_outputs:
            self.mark_output(node)
        for node in bwd_outputs:
            self.mark_output(node, _pb.TENSOR_ROLE_GRADIENT)
        self.name_gradients(bwd_outputs)

        tensors, tensor_of = self.tensors, self.tensor_of
        mark_batch_dim(graph, [tensors[t] for t in self.order],
                       [(op, info.node) for op, info in zip(self.op_protos, self.op_infos)],
                       tensor_of, [tensor_of[n] for n in self.primal_nodes])
        graph.tensors.extend(tensors[t] for t in self.order)
        graph.ops.extend(self.op_protos)
        return ConvertedGraph(
            joint=joint, graph=graph, ops=self.op_infos,
            op_index={info.node.name: i for i, info in enumerate(self.op_infos)},
            tensor_of=tensor_of, producer=self.producer, size_bytes=self.size_bytes,
            view_bases=self.view_bases, primal_nodes=self.primal_nodes,
            tangent_nodes=self.tangent_nodes, fwd_outputs=fwd_outputs,
            bwd_outputs=bwd_outputs, first_backward_op=first_backward_op,
            unused_tangents=[tensor_of[n] for n in self.tangent_nodes if n in self.unused])

    def name_gradients(self, bwd_outputs):
        """Tensor.gradient_of: each parameter's gradient names it (echod may
        then apply its update in the backward). The backward's outputs are
        the primals' gradients, in order; a tensor that is the gradient of
        two primals names neither."""
        if len(bwd_outputs) != len(self.primal_nodes):
            return
        # A gradient the backward returns as a view (nn.Linear's is the
        # transpose of a matmul) is named on its storage base: the tensor
        # whose bytes its update frees.
        tids = [storage_of(self.view_bases, self.tensor_of.get(n)) if n is not None else None
                for n in bwd_outputs]
        count = collections.Counter(tids)
        for tid, primal, info in zip(tids, self.primal_nodes, self.joint.primals):
            if (tid is not None and count[tid] == 1 and info.kind == ROLE_PARAMETER
                    and tid in self.producer
                    and self.tensors[tid].role == _pb.TENSOR_ROLE_GRADIENT):
                self.tensors[tid].gradient_of = self.tensor_of[primal]

    def add_tensor(self, tid, name, meta, role, size=None):
        t = _pb.Tensor(id=tid, name=name, role=role)
        if meta is not None:
            t.shape.extend(int(s) for s in meta.shape)
            t.dtype = DTYPES.get(meta.dtype, _pb.DTYPE_UNSPECIFIED)
            nbytes = storage_bytes(meta) if size is None else size
        else:
            nbytes = 0 if size is None else size
        t.size_bytes = nbytes
        self.size_bytes[tid] = nbytes
        self.tensors[tid] = t
        self.order.append(tid)
        return t

    def add_placeholders(self):
        """Primals (parameters, buffers, the batch), tangents, constants."""
        joint, nodes = self.joint, self.gm.graph.nodes
        self.unused = set(assumed_unused_tangents(joint, [n for n in nodes if ops.is_tangent(n)]))
        if self.unused:
            self.graph.metadata["unused_output_gradients"] = ",".join(
                n.name for n in nodes if n in self.unused)
        for node in nodes:
            if node.op == "placeholder":
                if ops.is_tangent(node):
                    self.tangent_nodes.append(node)
                    t = self.add_tensor(node.name, node.name, node_meta(node),
                                        _pb.TENSOR_ROLE_INPUT,
                                        size=0 if node in self.unused else None)
                    # Held by autograd through the backward, unless never sent.
                    t.is_output = node not in self.unused
                else:
                    primals = self.primal_nodes
                    info = (joint.primals[len(primals)] if len(primals) < len(joint.primals)
                            else PrimalInfo(ROLE_INPUT, node.name))
                    primals.append(node)
                    role = (_pb.TENSOR_ROLE_INPUT if info.kind == ROLE_INPUT
                            else _pb.TENSOR_ROLE_PARAMETER)
                    t = self.add_tensor(node.name, info.name, node_meta(node), role)
                    # The batch is the caller's: it holds it through the step.
                    t.is_output = role == _pb.TENSOR_ROLE_INPUT
                self.tensor_of[node] = node.name
            elif node.op == "get_attr":
                value = getattr(self.gm, node.target)
                self.add_tensor(node.name, str(node.target), meta_of_value(value),
                                _pb.TENSOR_ROLE_PARAMETER)
                self.tensor_of[node] = node.name

    def add_op(self, index, node, phase):
        """The op of call node `index`: its output tensors, its inputs (real
        ones in argument order, then storage bases of views) and its proto."""
        views, written = ops.aliasing(node.target)
        getitems = {u.args[1]: u for u in node.users if ops.is_getitem(u.target)}
        multi, out_metas = output_metas(node, node_meta(node), getitems, views)
        if views is None:
            views = [False] * len(out_metas)
        # A list return (split, unbind) is one schema return for many outputs.
        views = (views + [views[-1] if views else False] * len(out_metas))[:len(out_metas)]
        is_view = bool(out_metas) and all(views) and not written
        # An add of an unsent gradient is its other operand: 0 bytes, an
        # alias of that operand's storage (executor.without_inputs).
        folded = _zero_add_operand(node, self.unused) if self.unused else None
        if folded is not None:
            views = [True]
        outputs: List[Optional[str]] = []
        for pos, out_meta in enumerate(out_metas):
            if out_meta is None:
                outputs.append(None)
                continue
            tid = node.name if not multi else f"{node.name}:{pos}"
            self.add_tensor(tid, tid, out_meta, _pb.TENSOR_ROLE_ACTIVATION,
                            size=0 if views[pos] and not written else None)
            self.producer[tid] = (index, pos)
            outputs.append(tid)
        if multi:
            for pos, g in getitems.items():
                if outputs[pos] is not None:
                    self.tensor_of[g] = outputs[pos]
        elif outputs and outputs[0] is not None:
            self.tensor_of[node] = outputs[0]
        self.op_infos.append(OpInfo(node, outputs, is_view, multi, written, phase))
        inputs = self.op_inputs(node)
        self.alias_outputs(outputs, inputs, folded, is_view)
        self.op_protos.append(self.op_proto(node, phase, inputs, outputs, out_metas, written))

    def op_inputs(self, node) -> List[str]:
        inputs: List[str] = []
        for arg in _flat_nodes((node.args, node.kwargs)):
            tid = self.tensor_of.get(arg)
            if tid is not None and tid not in inputs:
                inputs.append(tid)
        for tid in list(inputs):
            for base in self.view_bases.get(tid, ()):
                if base not in inputs:
                    inputs.append(base)
        return inputs

    def alias_outputs(self, outputs, inputs, folded, is_view):
        """Storage bases of a view's outputs (and of a folded add's)."""
        view_bases = self.view_bases
        if folded is not None and outputs[0] is not None:
            other = self.tensor_of[folded]
            view_bases[outputs[0]] = list(view_bases.get(other) or [other])
        if is_view:
            bases = []
            for tid in inputs:
                for base in view_bases.get(tid) or [tid]:
                    if base not in bases:
                        bases.append(base)
            for tid in outputs:
                if tid is not None:
                    view_bases[tid] = bases

    def op_proto(self, node, phase, inputs, outputs, out_metas, written) -> "_pb.Op":
        op = _pb.Op(id=node.name, name=node.name, op_type=ops.op_type(node.target),
                    op_class=ops.op_class(node.target), phase=phase)
        op.input_ids.extend(inputs)
        op.output_ids.extend(t for t in outputs if t is not None)
        op.attributes["overload"] = ops.overload_name(node.target)
        alias = node.meta.get(ops.FIRST_RUN_ALIAS)
        if alias is not None and alias in self.tensor_of:
            op.attributes["first_run_alias"] = self.tensor_of[alias]  # no work the first time
        scalars = fx.node.map_arg((node.args, node.kwargs), lambda n: "%")
        # Whole or not at all: the planner counts the "%"s to find which
        # inputs are arguments (a stack's 50 steps need ~250 characters).
        args = repr(scalars)
        if len(args) <= _MAX_ARGS_CHARS:
            op.attributes["args"] = args
        fl = ops.flops(node.target, node.args, shape_of,
                       [m.shape if m else None for m in out_metas])
        if fl is not None:
            op.flops = fl
        op.recomputable = not ops.is_random(node.target) and not written
        substitute = ops.recompute_substitute(node.target)
        if substitute is not None:
            # Re-run without the outputs the original run already returned
            # (a batch norm's running statistics): the planner may then
            # recompute it (graph.h, kRecomputeOutputsAttribute). Counted in
            # output_ids, which leave out the outputs nobody reads.
            remade = sum(t is not None for t in outputs[:substitute.outputs])
            if remade:
                op.attributes["recompute_outputs"] = str(remade)
            else:
                op.recomputable = False
        return op

    def count_in_place_writes(self):
        """A fresh buffer consumed only by its writer is counted once (in
        the writer's output); other readers of a written tensor must not
        re-run, since they would see the written value."""
        op_infos, op_protos, producer = self.op_infos, self.op_protos, self.producer
        readers: Dict[str, List[int]] = {}
        for i, op in enumerate(op_protos):
            for tid in op.input_ids:
                readers.setdefault(tid, []).append(i)
        for i, info in enumerate(op_infos):
            for pos in info.written_args:
                if pos >= len(info.node.args) or not isinstance(info.node.args[pos], fx.Node):
                    continue
                tid = self.tensor_of.get(info.node.args[pos])
                if tid is None:
                    continue
                if (tid in producer and readers.get(tid) == [i] and ops.base_name(
                        op_infos[producer[tid][0]].node.target) in ops.FRESH_ALLOCATIONS):
                    self.tensors[tid].size_bytes = 0
                    self.size_bytes[tid] = 0
                for r in readers.get(tid, ()):
                    if r != i:
                        op_protos[r].recomputable = False

    def mark_output(self, node, role=None):
        tid = self.tensor_of.get(node) if node is not None else None
        if tid is None:
            return
        for t in [tid] + self.view_bases.get(tid, []):
            self.tensors[t].is_output = True
            if role is not None and t in self.producer:
                self.tensors[t].role = role
