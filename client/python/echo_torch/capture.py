"""Capture of the joint forward+backward graph, behind one small interface.

A Capture wraps a module so that, on its first call, the joint graph is traced
and handed to `partitioner(JointGraph) -> (forward_program,
backward_program)`; the programs (boxed callables, see executor.Program) then
run every step. Two implementations:

- Torch1Capture (torch 1.13): functorch.compile.aot_module with our
  partition_fn, called as partition_fn(joint_module, joint_inputs); the
  number of forward outputs is the first child of the joint module's output
  spec; joint_inputs[0] are the real primal tensors, matched to parameters by
  identity.
- Torch2Capture (torch >= 2): torch.compile with an aot_autograd backend,
  whose partition_fn gets num_fwd_outputs as a keyword. Dynamo may split the
  model into several graphs; each gets its own plan. Primals are fake tensors
  there, so parameters are told from inputs by requires_grad. Not exercised
  on this machine (torch 1.13).
"""
import abc
from typing import Callable, Dict, List, Tuple

import torch
import torch.nn as nn

from echo_torch.convert import (JointGraph, PrimalInfo, ROLE_BUFFER, ROLE_INPUT,
                                ROLE_PARAMETER)

Partitioner = Callable[[JointGraph], Tuple[Callable, Callable]]


def _compile_program(program, _example_inputs):
    return program  # executor.Program is already a boxed callable


def torch_major() -> int:
    return int(torch.__version__.split(".")[0])


class Capture(abc.ABC):
    name = "capture"

    @abc.abstractmethod
    def wrap(self, module: nn.Module, partitioner: Partitioner) -> Callable:
        """A callable with the module's signature that runs the partitioned
        programs (tracing on its first call)."""


class Torch1Capture(Capture):
    name = "functorch.aot_module"

    def wrap(self, module, partitioner):
        from functorch.compile import aot_module

        names: Dict[int, PrimalInfo] = {}
        for name, p in module.named_parameters():
            names.setdefault(id(p), PrimalInfo(ROLE_PARAMETER, name))
        for name, b in module.named_buffers():
            names.setdefault(id(b), PrimalInfo(ROLE_BUFFER, name))

        def partition_fn(joint_module, joint_inputs):
            primal_values = joint_inputs[0]
            primals: List[PrimalInfo] = []
            for value in primal_values:
                info = names.get(id(value))
                if info is None:
                    inputs_so_far = sum(p.kind == ROLE_INPUT for p in primals)
                    info = PrimalInfo(ROLE_INPUT, f"input_{inputs_so_far}")
                primals.append(info)
            num_fwd = joint_module._out_spec.children_specs[0].num_leaves
            joint = JointGraph(joint_module, num_fwd, primals,
                               name=type(module).__name__,
                               metadata={"capture": self.name},
                               example_inputs=joint_inputs)
            return partitioner(joint)

        return aot_module(module, fw_compiler=_compile_program,
                          bw_compiler=_compile_program, partition_fn=partition_fn)


class Torch2Capture(Capture):
    name = "torch.compile+aot_autograd"

    def wrap(self, module, partitioner):
        from torch._dynamo.backends.common import aot_autograd  # torch >= 2

        def partition_fn(joint_module, joint_inputs, num_fwd_outputs=None, **_):
            primal_values = joint_inputs[0]
            primals = [PrimalInfo(ROLE_PARAMETER if getattr(v, "requires_grad", False)
                                  else ROLE_INPUT, f"primal_{i}")
                       for i, v in enumerate(primal_values)]
            if num_fwd_outputs is None:
                num_fwd_outputs = joint_module._out_spec.children_specs[0].num_leaves
            joint = JointGraph(joint_module, num_fwd_outputs, primals,
                               name=type(module).__name__,
                               metadata={"capture": self.name},
                               example_inputs=joint_inputs)
            return partitioner(joint)

        backend = aot_autograd(fw_compiler=_compile_program,
                               bw_compiler=_compile_program,
                               partition_fn=partition_fn)
        return torch.compile(module, backend=backend, dynamic=False)


def default_capture() -> Capture:
    return Torch2Capture() if torch_major() >= 2 else Torch1Capture()
