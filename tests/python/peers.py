"""The peer we measure against: AOTAutograd's min-cut rematerialization
partitioner (torch._functorch.partitioners.min_cut_rematerialization_partition,
needs networkx), run with the same freeing executor as echo_torch's plans so
that both are measured the same way."""
import torch.nn as nn

from echo_torch.executor import program_from_graph_module


def mincut_module(module: nn.Module, partition_fn=None) -> nn.Module:
    """`module` under aot_module with torch's min-cut partition, or with
    `partition_fn` (e.g. one that wraps the min-cut and records what it did)."""
    from torch._functorch.aot_autograd import aot_module
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def compile_program(gm, _example_inputs):
        return program_from_graph_module(gm)

    return aot_module(module, fw_compiler=compile_program, bw_compiler=compile_program,
                      partition_fn=partition_fn or min_cut_rematerialization_partition)
