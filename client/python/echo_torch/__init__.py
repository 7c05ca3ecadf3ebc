"""echo_torch: the PyTorch hook of Echo.

    import echo_torch
    model = echo_torch.optimize(model, server="127.0.0.1:50051",
                                max_overhead_ratio=0.05)
    loss = model(batch).sum(); loss.backward()
    print(echo_torch.report(model))

    answer = echo_torch.max_batch_size(model, batch, device="a100-80gb")

    compiled = torch.compile(model, dynamic=False,
                             backend=echo_torch.backend(server="127.0.0.1:50051"))

The joint forward+backward graph is captured with AOTAutograd, converted to
an echo.v1.Graph, planned by echod (GenerateRecomputePlan), and run as a
forward program that saves the planned stash set and a backward program that
recomputes the rest where the plan says.
"""
from echo_torch.api import (EchoBackend, EchoModule, backend, capture_graph, optimize,
                            report)
from echo_torch.batch_size import max_batch_size
from echo_torch.client import (PlannerClient, PlanningError, ServerUnavailable,
                               resolve_address)
from echo_torch.pipeline import PlanReport
from echo_torch.plan_cache import PlanCache
from echo_torch.planners import POLICIES

__version__ = "0.2.0"

__all__ = ["optimize", "backend", "report", "capture_graph", "max_batch_size", "EchoModule",
           "EchoBackend", "PlanReport", "PlanCache", "PlannerClient", "PlanningError", "ServerUnavailable",
           "resolve_address", "POLICIES", "__version__"]
