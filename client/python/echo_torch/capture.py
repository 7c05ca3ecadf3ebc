"""Capture of the joint forward+backward graph through AOTAutograd.

Two entry points share one partition function:

- `capture_module(module, partitioner)`: AOTAutograd's `aot_module` around an
  nn.Module (what `echo_torch.optimize` uses). Primals are the module's
  parameters, then its buffers, then the flattened tensor arguments, in that
  order, with aliases (tied weights) removed as AOTAutograd removes them.
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
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

from echo_torch.convert import (JointGraph, PrimalInfo, ROLE_BUFFER, ROLE_INPUT,
                                ROLE_PARAMETER)
from echo_torch import ops
from echo_torch.executor import is_echo_module, program_of
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
    with config.patch(fallback_random=True):
        return compile_fx_inner(gm, example_inputs)


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
        return _inductor_compile, select_decomp_table()
    raise ValueError(f"unknown compiler {name!r}; one of {', '.join(COMPILERS)}")


def module_primals(module: nn.Module, args: Sequence, kwargs: dict) -> List[PrimalInfo]:
    """The primals aot_module traces, in its order:
    named parameters, named buffers (both with duplicates, as aot_module
    passes them), then the tensors among the flattened arguments; aliases of
    an earlier primal are dropped, as AOTAutograd deduplicates them."""
    named = []
    for name, p in module.named_parameters(remove_duplicate=False):
        named.append((PrimalInfo(ROLE_PARAMETER, name), p))
    for name, b in module.named_buffers(remove_duplicate=False):
        named.append((PrimalInfo(ROLE_BUFFER, name), b))
    flat_args = pytree.tree_flatten((list(args), kwargs))[0]
    count = 0
    for value in flat_args:
        if isinstance(value, torch.Tensor):
            named.append((PrimalInfo(ROLE_INPUT, f"input_{count}"), value))
            count += 1
    seen, unique = set(), []
    for info, value in named:
        if id(value) in seen:
            continue
        seen.add(id(value))
        unique.append(info)
    return unique


def _fallback_primals(fake_primals) -> List[PrimalInfo]:
    return [PrimalInfo(ROLE_PARAMETER if getattr(v, "requires_grad", False) else ROLE_INPUT,
                       f"primal_{i}") for i, v in enumerate(fake_primals)]


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
                      primals: Optional[List[PrimalInfo]],
                      started: Optional[float] = None):
    """An AOTAutograd partition_fn that converts and plans through
    `partitioner`. primals: the primals' names (None, or a count that does
    not match the joint graph's: named by requires_grad). started: when the
    capture began (default: now), for the log line."""
    if started is None:
        started = time.perf_counter()

    def partition_fn(joint_module, joint_inputs, *, num_fwd_outputs, **_):
        _drop_profiler_ranges(joint_module)
        fake_primals = joint_inputs[0]
        named = (primals if primals is not None and len(primals) == len(fake_primals)
                 else _fallback_primals(fake_primals))
        nodes = sum(1 for n in joint_module.graph.nodes if n.op == "call_function")
        logger.info("echo_torch: captured %s (%d joint ops) in %.1f s", name, nodes,
                    time.perf_counter() - started)
        joint = JointGraph(joint_module, num_fwd_outputs, named, name=name,
                           metadata={"capture": capture}, example_inputs=joint_inputs)
        return partitioner(joint)

    return partition_fn


def capture_module(module: nn.Module, partitioner: Partitioner, args: Sequence,
                   kwargs: dict, compiler: str = "eager") -> Callable:
    """aot_module(module) whose first call traces with `args`/`kwargs`' shapes
    and plans; later calls run the programs (the caller keys one capture per
    input signature, as aot_module does not re-trace on new shapes)."""
    from torch._functorch.aot_autograd import aot_module

    partition_fn = make_partition_fn(partitioner, type(module).__name__, "aot_module",
                                     module_primals(module, args, kwargs))
    compile_fn, decompositions = inner_compiler(compiler)
    return aot_module(module, fw_compiler=compile_fn, bw_compiler=compile_fn,
                      partition_fn=partition_fn, decompositions=decompositions)


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
