"""echo_torch.backend: a torch.compile backend whose graphs follow echod's
plans (each graph Dynamo hands it, and each size of a dynamic one)."""
import time
import warnings
from typing import Dict, List, Optional

import torch

from echo_torch import capture as capture_lib
from echo_torch.client import ServerUnavailable
from echo_torch.hook_common import _is_symbolic, _server_planner, _signature
from echo_torch.log import logger
from echo_torch.pipeline import InfeasibleWarning, PlannedGraph, PlanReport, plan_joint


class EchoBackend:
    """A torch.compile backend: AOTAutograd with echod's plan as the
    partition. Each graph Dynamo hands it gets its own plan; if echod is
    unreachable (or planning fails with on_error="fallback") the graph runs
    with torch's default partition and one warning is issued."""

    def __init__(self, planner, preflight=None, on_error="fallback",
                 measure_workspace=True, client_timing=False, compiler="eager"):
        self._compile_fn, self._decompositions = capture_lib.inner_compiler(compiler)
        self._planner = planner
        self._preflight = preflight
        self._on_error = on_error
        self._measure_workspace = measure_workspace
        self._client_timing = client_timing
        self._planned: List[PlannedGraph] = []
        self._infeasible = InfeasibleWarning()
        # Why the last graph that could not be planned runs with torch's
        # default partition, or None.
        self.fallback_reason: Optional[str] = None
        self._warned = False
        self._rnn_skips_at_start = rnn_skips()
        self._rnn_warned = False

    def reports(self) -> List[PlanReport]:
        return [planned.report for planned in self._planned]

    def _fall_back(self, reason: str) -> None:
        """One warning per backend (the first failed graph's), however many
        graphs Dynamo hands it; the others are logged."""
        first = not self._warned
        self._warned = True
        self.fallback_reason = reason
        if first:
            warnings.warn(f"echo_torch: {reason}; graphs run with torch's default partition",
                          RuntimeWarning, stacklevel=3)
        else:
            logger.info("echo_torch: %s; this graph runs with torch's default partition",
                        reason)

    def __call__(self, gm, example_inputs):
        _warn_skipped_rnn(self)
        if any(_is_symbolic(value) for value in example_inputs):
            return self._per_shape(gm)
        return self._compile(gm, example_inputs)

    def _per_shape(self, gm):
        """A graph Dynamo traced with symbolic sizes (torch.compile's default
        after a size changes: automatic dynamic shapes) is captured and
        planned again for each concrete signature at its first call, as
        optimize does: a plan, its programs and echod's prediction are for
        one set of sizes."""
        compiled: Dict[tuple, object] = {}

        def run(*args):
            key = (_signature(args, {}, None),
                   tuple(a.stride() for a in args if isinstance(a, torch.Tensor)))
            fn = compiled.get(key)
            if fn is None:
                logger.info("echo_torch: torch.compile graph with dynamic sizes: capturing "
                            "and planning for %s",
                            [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)])
                try:
                    fn = self._compile(gm, list(args))
                except Exception as error:  # noqa: BLE001
                    if self._on_error == "raise":
                        raise
                    warnings.warn(f"echo_torch: capturing the graph for these sizes failed "
                                  f"({type(error).__name__}: {error}); it runs as traced",
                                  RuntimeWarning, stacklevel=2)
                    fn = gm
                compiled[key] = fn
            return fn(*args)

        return run

    def _compile(self, gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd

        started = time.perf_counter()
        # Each graph tries on its own: one that could not be planned (echod
        # away, a graph it refused) leaves the next one free to.
        fallback = {"reason": None}

        def partitioner(joint):
            if fallback["reason"] is None:
                try:
                    planned = plan_joint(joint, self._planner, self._measure_workspace,
                                         self._client_timing)
                except Exception as error:  # noqa: BLE001
                    if self._on_error == "raise" and not isinstance(error, ServerUnavailable):
                        raise
                    fallback["reason"] = f"{error}"
                else:
                    self._planned.append(planned)
                    self._infeasible.check(planned.report, stacklevel=2)
                    return planned.programs.forward_module, planned.programs.backward_module
            from torch._functorch.partitioners import default_partition
            self._fall_back(fallback["reason"])
            return default_partition(joint.module, joint.example_inputs,
                                     num_fwd_outputs=joint.num_fwd_outputs)

        if self._preflight is not None:
            try:
                self._preflight()
            except ServerUnavailable as error:
                fallback["reason"] = str(error)

        # The capture's time in the log counts from Dynamo's call.
        eager = self._compile_fn is capture_lib.compile_program
        partition_fn = capture_lib.make_partition_fn(
            partitioner, f"graph_{len(self._planned)}", "torch.compile",
            capture_lib.dynamo_primals(gm, example_inputs), started,
            tangents_may_be_missing=eager, replay_random=eager)
        compiled = aot_autograd(fw_compiler=self._compile_fn, bw_compiler=self._compile_fn,
                                partition_fn=partition_fn,
                                decompositions=self._decompositions)(gm, example_inputs)
        if not eager or fallback["reason"] is not None:
            return compiled
        return _without_zero_gradients(compiled)


def _without_zero_gradients(compiled):
    """`compiled` (a planned graph) whose unused outputs' gradients are not
    materialized (capture.no_zero_gradients), in its calling convention and
    outside Dynamo's tracing, as Dynamo's own wrapper keeps it."""
    def run(*args):
        return capture_lib.no_zero_gradients(compiled(*args))

    if getattr(compiled, "_boxed_call", False):
        run._boxed_call = True
    return torch._dynamo.disable(run, reason="echo_torch: runs an AOT-compiled graph")


def backend(*, server: Optional[str] = None, policy: str = "AUTO",
            memory_limit_bytes: Optional[int] = None,
            max_overhead_ratio: Optional[float] = None, timeout_seconds: float = 30.0,
            device: Optional[str] = None, allocator_rounding_bytes: Optional[int] = None,
            max_recompute_depth: int = 0, solver_time_limit_seconds: float = 0.0,
            on_error: str = "fallback", measure_workspace: bool = True,
            client_timing: bool = False, plan_cache=True, planner=None,
            on_cuda: Optional[bool] = None, compiler: str = "eager",
            objective: str = "peak_bytes", chunking: str = "auto",
            optimizer=None) -> EchoBackend:
    """A torch.compile backend with the options of `optimize`:

        compiled = torch.compile(model, backend=echo_torch.backend(server=...),
                                 dynamic=False)

    on_cuda (for the allocator rounding default) is inferred from CUDA's
    availability when not given. `echo_torch.report(backend)` is the plan of
    the last graph; `backend.reports()` all of them."""
    capture_lib.check_torch_version()
    preflight = None
    if planner is None:
        if on_cuda is None:
            on_cuda = torch.cuda.is_available()
        planner, preflight = _server_planner(
            server, policy, memory_limit_bytes, max_overhead_ratio, timeout_seconds, device,
            allocator_rounding_bytes, max_recompute_depth, solver_time_limit_seconds,
            plan_cache, on_cuda, objective, chunking, optimizer)
    return EchoBackend(planner, preflight, on_error, measure_workspace, client_timing,
                       compiler)


_RNN_SKIPPED = "RNN, GRU, or LSTM"


def rnn_skips() -> int:
    """How often Dynamo has run an nn.RNN/GRU/LSTM eagerly in this process
    (it does not trace them unless torch._dynamo.config.allow_rnn), so that
    no backend saw or planned it."""
    from torch._dynamo.utils import counters
    return sum(count for reason, count in counters.get("unimplemented", {}).items()
               if _RNN_SKIPPED in reason)


def _warn_skipped_rnn(backend_: "EchoBackend") -> None:
    """Once per backend, when Dynamo skipped a recurrent layer since it was
    made."""
    if backend_._rnn_warned or rnn_skips() <= backend_._rnn_skips_at_start:
        return
    backend_._rnn_warned = True
    warnings.warn("echo_torch: torch.compile ran an nn.RNN/GRU/LSTM (and the frame "
                  "around it) eagerly, without a plan: Dynamo traces them only with "
                  "torch._dynamo.config.allow_rnn = True (set it before compiling), or "
                  "use echo_torch.optimize(model), which captures them",
                  RuntimeWarning, stacklevel=3)


def _echo_backend_of(model) -> Optional[EchoBackend]:
    """The EchoBackend of a torch.compile'd module, through Dynamo's wrappers."""
    ctx = getattr(model, "dynamo_ctx", None)
    if ctx is None:
        return None
    from torch._dynamo.eval_frame import innermost_backend
    found = innermost_backend(getattr(ctx, "callback", None))
    found = getattr(found, "compiler_fn", found)  # torch.compile's _TorchCompileWrapper
    return found if isinstance(found, EchoBackend) else None
