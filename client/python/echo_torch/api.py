"""echo_torch.optimize, echo_torch.backend and echo_torch.report: the
user-facing hook."""
import inspect
import time
import warnings
from typing import Dict, List, Optional

import torch
import torch.nn as nn

from echo_torch import capture as capture_lib
from echo_torch.capture_choice import CaptureChoice
from echo_torch.client import PlanningError, ServerUnavailable, unavailable_message
from echo_torch.convert import ConvertedGraph
from echo_torch.log import logger
from echo_torch.optimizer_spec import gradients_held
from echo_torch.update_in_backward import LoopWatch, Updater
from echo_torch.pipeline import InfeasibleWarning, PlannedGraph, PlanReport, plan_joint
from echo_torch.compile_backend import (EchoBackend, _echo_backend_of, _warn_skipped_rnn,
                                        backend)
from echo_torch.hook_common import (  # noqa: F401 - default_device: re-exported
    REFERENCE_DEVICE, _capture_hint, _server_planner, _signature, default_device)
from echo_torch.parallel import refuse_parallel_wrapper, refuse_sharded_layers, sharded_modules
from echo_torch.planners import PlainPlanner

__all__ = ["EchoModule", "EchoBackend", "PlanReport", "optimize", "backend", "report",
           "capture_graph"]


def _hooked_modules(model: nn.Module) -> List[str]:
    """Submodules with forward or backward hooks, each with the kinds."""
    found = []
    for name, module in model.named_modules():
        kinds = [kind for kind, hooks in (
            ("forward pre", module._forward_pre_hooks), ("forward", module._forward_hooks),
            ("backward pre", getattr(module, "_backward_pre_hooks", None)),
            ("backward", module._backward_hooks)) if hooks]
        if kinds:
            found.append(f"{name or type(model).__name__} ({', '.join(kinds)})")
    return found


_INNER = "module."  # EchoModule's attribute holding the wrapped module


def _drop_inner_prefix(module, state_dict, prefix, local_metadata):
    inner = prefix + _INNER
    items = list(state_dict.items())
    state_dict.clear()
    for key, value in items:
        state_dict[prefix + key[len(inner):] if key.startswith(inner) else key] = value
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:  # per-module versions, keyed by prefix without its dot
        for key in [k for k in metadata if (k + ".").startswith(inner)]:
            rest = key[len(inner):]  # "" for the wrapped module itself
            metadata[prefix + rest if rest else prefix[:-1]] = metadata.pop(key)


def _add_inner_prefix(module, state_dict, prefix, *_):
    inner = prefix + _INNER
    for key in [k for k in state_dict if k.startswith(prefix)]:
        state_dict[inner + key[len(prefix):]] = state_dict.pop(key)


class _Entry:
    def __init__(self):
        self.fn = None
        self.planned: Optional[PlannedGraph] = None
        self.shapes = ""  # the call's tensor shapes, for its report


class _Failure:
    """An input signature that could not be planned, and when to try again.
    Failures of the server (unreachable, died, timed out) are retried with
    backoff; the plan's own failures (echod refused the graph, capture
    failed) are not: the same graph would fail the same way."""

    def __init__(self, reason: str, retryable: bool):
        self.reason = reason
        self.retryable = retryable
        self.attempts = 1
        self.retry_at = time.monotonic() + EchoModule.RETRY_SECONDS

    def again(self, reason: str, retryable: bool) -> None:
        self.reason, self.retryable = reason, retryable
        self.attempts += 1
        delay = min(EchoModule.RETRY_SECONDS * 2 ** (self.attempts - 1),
                    EchoModule.MAX_RETRY_SECONDS)
        self.retry_at = time.monotonic() + delay

    def due(self) -> bool:
        return self.retryable and time.monotonic() >= self.retry_at


def _unavailable_reason(error: ServerUnavailable, was_up: bool) -> str:
    """was_up: echod answered the health check that opened this request, so
    losing it now means it went away during the request (gRPC may report
    that as a refused reconnect, after retrying)."""
    text = str(error)
    kind = error.kind
    if was_up and kind == "unreachable" and error.detail:
        kind, text = "died", unavailable_message("died", error.address, error.detail)
    what = {"died": "echod died during the request",
            "timeout": "echod did not answer in time",
            "not_serving": "echod is starting or draining"}.get(kind, "echod unreachable")
    return (f"{what}: {text}; this input signature runs unmodified and is planned again "
            f"once echod answers (planned signatures keep their plans)")


def unplanned_report(reason: str) -> PlanReport:
    """The report of a step that ran the model unmodified, and why."""
    return PlanReport(source="unplanned", ops=0, tensors=0, unplanned_reason=reason)


# One EchoModule subclass per wrapped class (_wrapper_class).
_WRAPPER_CLASSES: Dict[type, type] = {}


def _set_real_class(module, cls) -> None:
    """Assigning __class__ sets the real class. A class derived from what
    the wrapper's __class__ shows (fully_shard makes FSDP<class>(FSDPModule,
    <class>) from it) derives from the wrapper's class in its place, so that
    the module stays a wrapper."""
    real = type(module)
    shown = module.__class__
    if issubclass(cls, shown) and not issubclass(cls, real):
        bases = tuple(real if base is shown else base for base in cls.__bases__)
        namespace = {key: value for key, value in vars(cls).items()
                     if key not in ("__dict__", "__weakref__")}
        cls = type(cls.__name__, bases, namespace)
    object.__dict__["__class__"].__set__(module, cls)


def _wrapper_class(wrapped: type) -> type:
    """The EchoModule subclass for modules of class `wrapped`: its forward
    has `wrapped.forward`'s signature, so that callers that read it (Hugging
    Face's Trainer picks the columns it passes and whether the model takes
    loss kwargs from it) see the model, not (*args, **kwargs), and its
    instances pass isinstance checks for `wrapped`."""
    cls = _WRAPPER_CLASSES.get(wrapped)
    if cls is None:
        def forward(self, *args, **kwargs):
            return self.run(*args, **kwargs)
        try:
            forward.__signature__ = inspect.signature(wrapped.forward)
        except (TypeError, ValueError):
            pass  # a forward inspect cannot read: (*args, **kwargs) then
        forward.__doc__ = wrapped.forward.__doc__
        name = f"EchoModule_{wrapped.__name__}"
        # isinstance(wrapper, wrapped) holds, as for the model itself (the
        # Trainer saves a PreTrainedModel with save_pretrained, which knows
        # tied weights); type(wrapper) stays this class. Assigning __class__
        # still sets the real one (fully_shard makes the module an instance
        # of an FSDP subclass of its class).
        cls = type(name, (EchoModule,), {"forward": forward, "__module__": __name__,
                                         "__qualname__": name,
                                         "__class__": property(lambda self: wrapped,
                                                              _set_real_class)})
        _WRAPPER_CLASSES[wrapped] = cls
    return cls


class EchoModule(nn.Module):
    """Runs `module` with forward/backward programs built from a plan.

    One capture and plan per input signature (shapes, dtypes, training mode,
    autocast); the first call with a new signature captures and plans, and
    the plan cache on disk makes the next process skip planning. Calls
    without gradients (torch.no_grad, inference) run the module unchanged.
    A signature that cannot be planned runs unmodified, alone: the others
    keep their plans, and one that failed because echod was away is tried
    again (after RETRY_SECONDS, doubling up to MAX_RETRY_SECONDS).
    """

    RETRY_SECONDS = 1.0
    MAX_RETRY_SECONDS = 60.0

    def __init__(self, module: nn.Module, planner, on_error: str = "fallback",
                 preflight=None, measure_workspace: bool = True,
                 client_timing: bool = False, compiler: str = "eager",
                 update_in_backward: Optional[torch.optim.Optimizer] = None,
                 dynamic_shapes="auto"):
        super().__init__()
        if on_error not in ("fallback", "raise"):
            raise ValueError(f"on_error must be 'fallback' or 'raise', not {on_error!r}")
        capture_lib.inner_compiler(compiler)  # validates the name
        self._compiler = compiler
        self._choice = CaptureChoice(module, compiler, dynamic_shapes)
        # The entry whose first call is planning now (the partitioner sets
        # its plan; a family's partitioner runs once per new shape).
        self._planning: Optional[_Entry] = None
        self.module = module
        self._planner = planner
        # With optimize(optimizer=...), each step's plan counts the gradients
        # it starts with (optimizer_spec.gradients_held).
        options = getattr(planner, "options", None)
        self._counts_optimizer = getattr(options, "optimizer", None) is not None
        # With update_in_backward=True: the loop it learns the loop from
        # (update_in_backward.py); None without.
        self._watch = None
        if update_in_backward is not None:
            if not self._counts_optimizer or compiler != "eager":
                raise ValueError("echo_torch: update_in_backward needs optimizer= and "
                                 "compiler='eager'")
            self._watch = LoopWatch(update_in_backward, module)
        self._on_error = on_error
        self._preflight = preflight
        self._measure_workspace = measure_workspace
        self._client_timing = client_timing
        self._entries: Dict[tuple, _Entry] = {}
        self._failures: Dict[tuple, _Failure] = {}
        # What the last training step ran: a planned entry, or the reason it
        # ran unmodified (report() and fallback_reason say which).
        self._last: Optional[_Entry] = None
        self._last_unplanned: Optional[str] = None
        self._infeasible = InfeasibleWarning()
        # Checkpoints hold the wrapped module's own keys ("0.weight", not
        # "module.0.weight"), so they load into the model with or without
        # the hook, as training code expects.
        self.register_state_dict_post_hook(_drop_inner_prefix)
        self.register_load_state_dict_pre_hook(_add_inner_prefix)

    @property
    def fallback_reason(self) -> Optional[str]:
        """Why the last training step ran unmodified, or None when it ran a
        plan (or no step ran yet)."""
        return self._last_unplanned

    @property
    def converted(self) -> Optional[ConvertedGraph]:
        return self._last.planned.converted if self._last and self._last.planned else None

    @property
    def programs(self):
        return self._last.planned.programs if self._last and self._last.planned else None

    def reports(self) -> List[PlanReport]:
        return [e.planned.report for e in self._entries.values() if e.planned is not None]

    def last_report(self) -> Optional[PlanReport]:
        """The plan the last training step ran, or an unplanned report
        saying why it ran unmodified; None before the first step."""
        if self._last_unplanned is not None:
            return unplanned_report(self._last_unplanned)
        return self._last.planned.report if self._last and self._last.planned else None

    def __new__(cls, module=None, *args, **kwargs):
        if cls is EchoModule and isinstance(module, nn.Module):
            cls = _wrapper_class(type(module))
        return super().__new__(cls)

    def forward(self, *args, **kwargs):
        return self.run(*args, **kwargs)

    def __getattr__(self, name: str):
        # The wrapper is the model to its callers: what it does not define
        # (config, generate, save_pretrained, device, loss_type, ...) is the
        # wrapped module's.
        try:
            return super().__getattr__(name)
        except AttributeError:
            inner = self.__dict__.get("_modules", {}).get("module")
            if inner is None or name.startswith("__"):
                raise
            return getattr(inner, name)

    def run(self, *args, **kwargs):
        """The training step planned, or the module itself for calls without
        gradients (evaluation, generation)."""
        if (not torch.is_grad_enabled()
                or not any(p.requires_grad for p in self.module.parameters())):
            return self.module(*args, **kwargs)
        held = self._counts_optimizer and gradients_held(self.module)
        mode = "held" if held else "fresh"
        if self._watch is not None:
            self._watch.on_training_step(held)
            if not held and self._watch.ready():
                mode = "in_backward"
        key = (_signature(args, kwargs, self.module.training), mode)
        entry = self._entries.get(key)
        if entry is not None:
            self._last, self._last_unplanned = entry, None
            return entry.fn(*args, **kwargs)
        failure = self._failures.get(key)
        if failure is not None and not failure.due():
            self._last_unplanned = failure.reason
            return self.module(*args, **kwargs)
        return self._first_call(key, args, kwargs)

    def _partitioner(self, mode: str):
        # A step that starts with gradients held (the second micro-batch on,
        # or after zero_grad(set_to_none=False)) is planned with them.
        planner = self._planner
        if mode == "held":
            planner = planner.holding_gradients()
        elif mode == "in_backward":
            planner = planner.updating_in_backward()

        def partitioner(joint):
            entry = self._planning
            entry.planned = plan_joint(joint, planner, self._measure_workspace,
                                       self._client_timing)
            entry.planned.report.shapes = entry.shapes
            self._infeasible.check(entry.planned.report, stacklevel=8)
            programs = entry.planned.programs
            if joint.family is not None:  # one size of a symbolic capture
                return programs.forward, programs.backward
            return programs.forward_module, programs.backward_module

        return partitioner

    def _first_call(self, key, args, kwargs):
        entry = _Entry()
        entry.shapes = ", ".join(
            str(tuple(v.shape)) for v in torch.utils._pytree.tree_leaves((args, kwargs))
            if isinstance(v, torch.Tensor))
        if self._entries:
            logger.info("echo_torch: new input signature for %s (%s): planning it",
                        type(self.module).__name__, entry.shapes)
        elif key not in self._failures and not sharded_modules(self.module):
            hooked = _hooked_modules(self.module)
            if hooked:
                warnings.warn(
                    f"echo_torch: module hooks on {', '.join(hooked)} run while a step is "
                    "captured, not at every step: what they compute is part of the plan; "
                    "what they do on the side (logging, keeping tensors) happens at capture "
                    "only", RuntimeWarning, stacklevel=3)
        def start(capture):
            entry.fn = capture
            self._planning = entry
            return capture(*args, **kwargs)

        was_up = False
        try:
            refuse_sharded_layers(self.module, PlanningError)
            if self._preflight is not None:
                self._preflight()
                was_up = True
            entry.fn, out = self._choice.run_first(key[1], self._partitioner(key[1]), args,
                                                   kwargs, start)
            if key[1] == "in_backward":
                self._update_in_backward(entry)
        except ServerUnavailable as error:  # falls back under either on_error
            return self._fall_back(key, _unavailable_reason(error, was_up), True, args,
                                   kwargs)
        except Exception as error:  # noqa: BLE001
            if self._on_error == "raise":
                raise
            return self._fall_back(
                key, f"planning failed ({type(error).__name__}: {error}); this input "
                f"signature runs unmodified{_capture_hint(error)}", False, args, kwargs)
        if self._failures.pop(key, None) is not None:
            logger.warning("echo_torch: echod answered again; this input signature of %s "
                           "now runs its plan", type(self.module).__name__)
        self._entries[key] = entry
        self._last, self._last_unplanned = entry, None
        return out

    def _update_in_backward(self, entry) -> None:
        """Hands the gradients the plan updates in the backward to the
        optimizer there (before this step's backward runs)."""
        positions = entry.planned.updated_positions
        if not positions:
            return
        names = entry.fn.layout.state_names
        params = dict(self.module.named_parameters())
        by_position = {i: params[names[i]] for i in positions
                       if i < len(names) and names[i] in params}
        entry.planned.programs.backward.updater = Updater(
            self._watch.optimizer, by_position, self._watch.updated)

    def _fall_back(self, key, reason, retryable, args, kwargs):
        failure = self._failures.get(key)
        if failure is None:
            self._failures[key] = _Failure(reason, retryable)
            warnings.warn(f"echo_torch: {reason}", RuntimeWarning, stacklevel=4)
        else:
            failure.again(reason, retryable)
            logger.info("echo_torch: planning again failed (attempt %d): %s",
                        failure.attempts, reason)
        self._last_unplanned = reason
        return self.module(*args, **kwargs)


def optimize(model: nn.Module, *, server: Optional[str] = None, policy: str = "AUTO",
             memory_limit_bytes: Optional[int] = None,
             max_overhead_ratio: Optional[float] = None,
             timeout_seconds: float = 30.0, device: Optional[str] = None,
             allocator_rounding_bytes: Optional[int] = None,
             max_recompute_depth: int = 0, solver_time_limit_seconds: float = 0.0,
             on_error: str = "fallback", measure_workspace: bool = True,
             client_timing: bool = False, plan_cache=True, planner=None,
             compiler: str = "eager", objective: str = "peak_bytes",
             chunking: str = "auto", optimizer=None,
             update_in_backward: bool = False, dynamic_shapes="auto") -> EchoModule:
    """Wraps `model` so that its training steps follow an echod recompute plan.

    server: "host:port" or "unix:///path" (default $ECHO_SERVER, else
    127.0.0.1:50051). policy: AUTO, NONE, ECHO, CHEN_SQRT or OPTIMAL. Give at
    most one of memory_limit_bytes and max_overhead_ratio (neither: the
    server's default of 5% overhead). objective (AUTO with an overhead
    budget): "peak_bytes" minimizes the step's peak, "stash_bytes" the bytes
    the forward leaves for the backward, never above the plain peak (what
    torch's activation_memory_budget minimizes). device: the DeviceSpec catalog name
    whose roofline prices the ops (default: the model's GPU if the catalog
    knows it, else h100-80gb; a CPU model: this CPU as measured, host_cpu.py,
    its ops priced by the workspace run's times). If echod is unreachable, or
    dies during a request, that input signature runs unmodified (one warning
    says which happened) and is planned again once echod answers; signatures
    already planned keep their plans. on_error="raise" raises on planning
    failures (echod refused the graph, capture failed) instead of falling
    back. measure_workspace:
    run the joint graph once at capture to measure each op's temporaries.
    client_timing: also time each op here and send the times (off: echod's
    cost model prices ops, so the same model and server give the same plan).
    plan_cache: True (the default cache directory), a PlanCache, or False.
    planner: a local planner (echo_torch.planners) instead of echod.
    compiler: the inner compiler of the planned graphs, "eager" (op by op, as
    planned) or "inductor". chunking: "auto" (AUTO may run the loss and its
    backward in chunks, docs/pytorch.md; with either compiler) or "off".
    optimizer: the torch.optim optimizer that trains the model: the plan and
    report(model) are then for the iteration, with its state and step
    (SGD, SGD with momentum, Adam, AdamW, Adagrad, RMSprop; the hook does
    not run or change it); None: forward+backward, and the report says the
    optimizer is not included. With an optimizer, a step that starts with
    gradients held (gradient accumulation's later micro-batches, or
    zero_grad(set_to_none=False)) is planned with them, once per signature.
    update_in_backward: with optimizer=, apply each parameter's update in the
    backward as soon as its gradient is complete and free the gradient
    there, where echod finds that it lowers the peak (docs/pytorch.md). The
    first iteration runs as planned without it and shows whether the loop
    allows it: one backward per optimizer.step(), gradients untouched in
    between (no clipping, unscaling, accumulation or data parallelism);
    otherwise a warning says why and the step stays at the end.
    dynamic_shapes: "auto" captures a call's first shape as it is and, when
    a call differs from it only in sizes, captures once more with those
    dimensions symbolic, a capture that then serves the later calls that
    differ in those dimensions and keep its guards (each new size is
    planned without a trace, docs/pytorch.md); True: symbolic in
    every input dimension from the first call; False: one capture per
    shape. Symbolic sizes need compiler="eager".
    Wrapping an EchoModule again re-wraps its
    inner module.
    """
    if isinstance(model, EchoModule):
        warnings.warn("echo_torch: the model is already wrapped by echo_torch.optimize; "
                      "re-wrapping its inner module with the new options", RuntimeWarning,
                      stacklevel=2)
        model = model.module
    refuse_parallel_wrapper(model)
    capture_lib.check_torch_version()
    preflight = None
    if planner is None:
        on_cuda = any(p.is_cuda for p in model.parameters())
        planner, preflight = _server_planner(
            server, policy, memory_limit_bytes, max_overhead_ratio, timeout_seconds, device,
            allocator_rounding_bytes, max_recompute_depth, solver_time_limit_seconds,
            plan_cache, on_cuda, objective, chunking, optimizer)
    if update_in_backward and optimizer is None:
        raise ValueError("echo_torch: update_in_backward=True needs optimizer= (the "
                         "optimizer whose updates run in the backward)")
    return EchoModule(model, planner, on_error=on_error, preflight=preflight,
                      measure_workspace=measure_workspace, client_timing=client_timing,
                      compiler=compiler,
                      update_in_backward=optimizer if update_in_backward else None,
                      dynamic_shapes=dynamic_shapes)


def report(model) -> Optional[PlanReport]:
    """What the plans did: for an optimize()d model, its most recent input
    signature's plan; for a backend (or a module torch.compile'd with one),
    every graph's plan together (PlanReport.combine; each in `.graphs`).
    For an optimize()d model whose last step ran unmodified, a report with
    `unplanned_reason` set (and no peaks). None before the first training
    step (under torch.compile, a skipped nn.LSTM says so in a warning)."""
    if isinstance(model, EchoBackend) or _echo_backend_of(model) is not None:
        backend_ = model if isinstance(model, EchoBackend) else _echo_backend_of(model)
        reports = backend_.reports()
        _warn_skipped_rnn(backend_)
        return PlanReport.combine(reports) if reports else None
    if not isinstance(model, EchoModule):
        raise TypeError(f"echo_torch.report expects a module from echo_torch.optimize, a "
                        f"backend from echo_torch.backend or a module torch.compile'd with "
                        f"one; got {type(model).__name__}")
    return model.last_report()


def capture_graph(model: nn.Module, *args, **kwargs) -> ConvertedGraph:
    """Captures one training-mode step of `model` on `args` and returns the
    converted joint graph; needs no server. Module state is unchanged (the
    step's forward runs, its buffer updates are undone)."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    wrapped = EchoModule(model, PlainPlanner(), on_error="raise")
    with torch.enable_grad():
        wrapped(*args, **kwargs)
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(buffers[name])
    return wrapped.converted
