"""echo_torch: the PyTorch hook of Echo.

    import echo_torch
    model = echo_torch.optimize(model, server="127.0.0.1:50051",
                                max_overhead_ratio=0.05)
    loss = model(batch).sum(); loss.backward()
    print(echo_torch.report(model))

The joint forward+backward graph is captured with AOTAutograd, converted to
an echo.v1.Graph, planned by echod (GenerateRecomputePlan), and run as a
forward program that saves the planned stash set and a backward program that
recomputes the rest where the plan says.
"""
from echo_torch.api import EchoModule, PlanReport, capture_graph, optimize, report
from echo_torch.client import PlannerClient, ServerUnavailable, resolve_address
from echo_torch.planners import POLICIES

__all__ = ["optimize", "report", "capture_graph", "EchoModule", "PlanReport",
           "PlannerClient", "ServerUnavailable", "resolve_address", "POLICIES"]
