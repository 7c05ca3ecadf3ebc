"""What the planner needs to know about an aten op: its class, whether its
outputs alias its inputs, whether it may run twice, and its FLOPs."""
import dataclasses
import math
import operator
from typing import Any, Callable, Optional

import torch

from echo_torch import proto

_OpClass = proto.graph_pb2.OpClass

# Keyed by the op's base name (overload packet, without "aten::").
_GEMM = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "dot",
         "mv", "addmv", "einsum", "_scaled_dot_product_attention"}
_CONV = {"convolution", "convolution_backward", "_convolution", "conv2d",
         "conv1d", "conv3d", "mkldnn_convolution", "cudnn_convolution",
         "_convolution_double_backward"}
_NORM = {"native_batch_norm", "native_batch_norm_backward", "native_layer_norm",
         "native_layer_norm_backward", "native_group_norm",
         "native_group_norm_backward", "_native_batch_norm_legit",
         "_native_batch_norm_legit_functional", "batch_norm_backward"}
_SOFTMAX = {"_softmax", "softmax", "_log_softmax", "log_softmax",
            "_softmax_backward_data", "_log_softmax_backward_data"}
_REDUCTION = {"sum", "mean", "amax", "amin", "max", "min", "var", "std",
              "var_mean", "std_mean", "prod", "norm", "argmax", "argmin",
              "logsumexp", "nll_loss_forward", "nll_loss_backward",
              "nll_loss2d_forward", "nll_loss2d_backward", "cumsum", "any",
              "all", "mse_loss", "_grad_sum_to_size", "sum_to_size"}
_DATA_MOVEMENT = {"view", "_unsafe_view", "reshape", "_reshape_alias",
                  "permute", "transpose", "t", "expand", "slice", "select",
                  "cat", "stack", "clone", "squeeze", "unsqueeze", "split",
                  "split_with_sizes", "unbind", "chunk", "narrow", "alias",
                  "detach", "contiguous", "as_strided", "copy", "copy_",
                  "_to_copy", "to", "flatten", "unflatten", "index_select",
                  "gather", "scatter", "scatter_add", "index", "index_put",
                  "slice_backward", "select_backward", "new_zeros",
                  "new_empty", "empty_like", "zeros_like", "ones_like",
                  "full_like", "zeros", "ones", "full", "empty", "empty_strided",
                  "new_empty_strided", "scalar_tensor", "arange", "repeat",
                  "constant_pad_nd", "lift_fresh_copy", "lift_fresh",
                  "_unsafe_index", "expand_as", "view_as", "fill", "fill_",
                  "zero", "zero_", "masked_fill", "where", "roll", "flip",
                  "index_add", "max_pool2d_with_indices",
                  "max_pool2d_with_indices_backward", "avg_pool2d",
                  "avg_pool2d_backward", "_adaptive_avg_pool2d",
                  "_adaptive_avg_pool2d_backward", "diagonal", "unfold"}
_RANDOM = {"rand", "rand_like", "randn", "randn_like", "bernoulli",
           "bernoulli_", "native_dropout", "dropout", "randint", "randint_like",
           "randperm", "normal", "uniform", "uniform_", "normal_", "multinomial",
           "exponential_", "_fused_dropout", "rrelu_with_noise",
           # dropout.py: reads the generator, so a second run reads another state
           "rng_state"}
_EMBEDDING = {"embedding", "embedding_dense_backward", "embedding_backward",
              "_embedding_bag", "embedding_bag"}
_COLLECTIVE = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
               "all_to_all"}

# Ops whose outputs share their input's storage although the schema does not
# say so (`_unsafe_view` is view() without the alias annotation).
_UNANNOTATED_VIEWS = {"_unsafe_view"}

# Ops that allocate a fresh buffer without reading data: when an in-place op
# is their only reader, the in-place op's output owns the bytes.
FRESH_ALLOCATIONS = {"empty_like", "empty", "new_empty", "empty_strided",
                     "new_empty_strided", "empty.memory_format"}

@dataclasses.dataclass(frozen=True)
class RecomputeSubstitute:
    """What a recomputation runs instead of an op whose original reads an
    input that AOTAutograd updates in place after the forward (a saved
    reference to it would fail autograd's version check): `target` on
    `args(original_args)`, producing the first `outputs` outputs."""
    target: Any
    args: Callable
    outputs: int


def recompute_substitute(target) -> Optional[RecomputeSubstitute]:
    """A training-mode batch norm recomputed without its running statistics
    (the no_stats overload) gives the same output, mean and rstd, and leaves
    the statistics, which the forward updated, alone."""
    if op_type(target) == "echo::dropout_draw":
        # dropout.py: the same draw from the state the first run drew from.
        return RecomputeSubstitute(torch.ops.echo.dropout_replay.default, lambda a: a, 2)
    if base_name(target) == "_native_batch_norm_legit_functional":
        # (input, weight, bias, running_mean, running_var, training, momentum, eps)
        return RecomputeSubstitute(
            torch.ops.aten._native_batch_norm_legit.no_stats,
            lambda a: (a[0], a[1], a[2], a[5], a[6], a[7]), 3)
    return None


def base_name(target):
    """"addmm" for aten.addmm.default; the function name for other callables."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name.split("::", 1)[-1]
    return getattr(target, "__name__", str(target))


def op_type(target):
    """Framework op type, e.g. "aten::addmm"."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name
    return getattr(target, "__module__", "python") + "::" + base_name(target)


def overload_name(target):
    schema = getattr(target, "_schema", None)
    return schema.overload_name if schema is not None else ""


def op_class(target):
    name = base_name(target)
    # In-place variants (add_, relu_) share their functional op's class.
    functional = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    for names, cls in ((_GEMM, _OpClass.OP_CLASS_GEMM),
                       (_CONV, _OpClass.OP_CLASS_CONV),
                       (_NORM, _OpClass.OP_CLASS_NORM),
                       (_SOFTMAX, _OpClass.OP_CLASS_SOFTMAX),
                       (_RANDOM, _OpClass.OP_CLASS_RANDOM),
                       (_EMBEDDING, _OpClass.OP_CLASS_EMBEDDING),
                       (_COLLECTIVE, _OpClass.OP_CLASS_COLLECTIVE),
                       (_REDUCTION, _OpClass.OP_CLASS_REDUCTION),
                       (_DATA_MOVEMENT, _OpClass.OP_CLASS_DATA_MOVEMENT)):
        if name in names or functional in names:
            return cls
    if getattr(target, "_schema", None) is not None:
        # Remaining aten ops are overwhelmingly pointwise math (add, mul, tanh,
        # sigmoid, threshold_backward, ...).
        return _OpClass.OP_CLASS_ELEMENTWISE
    return _OpClass.OP_CLASS_OTHER


def is_random(target):
    return op_class(target) == _OpClass.OP_CLASS_RANDOM


def aliasing(target):
    """(view_outputs, written_args) from the schema's alias annotations.

    view_outputs: per output, True when it aliases an input without writing
    it (a view). written_args: positions of arguments written in place.
    """
    schema = getattr(target, "_schema", None)
    if schema is None:
        return None, ()
    unannotated_view = base_name(target) in _UNANNOTATED_VIEWS
    views = []
    for ret in schema.returns:
        info = ret.alias_info
        views.append(unannotated_view or (info is not None and not info.is_write))
    written = tuple(i for i, arg in enumerate(schema.arguments)
                    if arg.alias_info is not None and arg.alias_info.is_write)
    return views, written


def _numel(shape):
    return math.prod(int(s) for s in shape)


def flops(target, args, input_shape, output_shapes):
    """FLOPs of one execution for GEMMs and convolutions; None otherwise.

    input_shape(arg) gives the shape of a graph-value argument (None for
    non-tensors); output_shapes lists the shapes of the op's outputs (None for
    absent ones).
    """
    name = base_name(target)
    try:
        if name == "mm":
            (m, k), (_, n) = input_shape(args[0]), input_shape(args[1])
            return 2.0 * m * n * k
        if name == "addmm":
            (m, k), (_, n) = input_shape(args[1]), input_shape(args[2])
            return 2.0 * m * n * k + m * n
        if name in ("bmm", "baddbmm"):
            i = 0 if name == "bmm" else 1
            (b, m, k), (_, _, n) = input_shape(args[i]), input_shape(args[i + 1])
            return 2.0 * b * m * n * k
        if name == "convolution":
            weight = input_shape(args[1])
            out = output_shapes[0]
            # weight: [C_out, C_in / groups, *kernel]
            return 2.0 * _numel(out) * _numel(weight[1:])
        if name == "convolution_backward":
            grad_out, weight = input_shape(args[0]), input_shape(args[2])
            mask = args[10] if len(args) > 10 else (True, True, True)
            per_pass = 2.0 * _numel(grad_out) * _numel(weight[1:])
            return per_pass * (int(bool(mask[0])) + int(bool(mask[1])))
    except (TypeError, ValueError, IndexError):
        return None
    return None


def zero_add_operand(target, args, kwargs, is_zero) -> Optional[int]:
    """For `aten.add.Tensor(a, b)` with exactly one operand known to be zero
    (`is_zero(arg)`), the position of the other one: the sum is that operand
    (the caller checks that shapes and dtypes agree). None for any other op.
    How a gradient no one sent is added away (an output's unused gradient
    is added to the gradient that reaches the same tensor another way)."""
    if target is not torch.ops.aten.add.Tensor or len(args) != 2 or kwargs.get("alpha", 1) != 1:
        return None
    zero = [is_zero(a) for a in args]
    if zero.count(True) != 1:
        return None
    return zero.index(False)


def is_getitem(target):
    return target is operator.getitem


def is_tangent(node):
    """A joint graph's placeholder for an output's gradient."""
    return node.op == "placeholder" and "tangents" in str(node.target)


# Node meta key: the node whose value this node's original run hands on
# (it does no work; a recomputation does), e.g. dropout.py's
# echo::dropout_output, which native_dropout's output already is. The
# converter tells echod (op attribute "first_run_alias") and the executor
# aliases it.
FIRST_RUN_ALIAS = "echo_first_run_alias_of"
