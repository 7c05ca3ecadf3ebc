"""The peer we measure against: AOTAutograd's min-cut rematerialization
partitioner (functorch.compile.min_cut_rematerialization_partition, needs
networkx), run with the same freeing executor as echo_torch's plans so that
both are measured the same way."""
import torch.nn as nn

from echo_torch.executor import program_from_graph_module


def mincut_module(module: nn.Module) -> nn.Module:
    from functorch.compile import aot_module, min_cut_rematerialization_partition

    def compile_program(gm, _example_inputs):
        return program_from_graph_module(gm)

    return aot_module(module, fw_compiler=compile_program, bw_compiler=compile_program,
                      partition_fn=min_cut_rematerialization_partition)
