"""Which capture runs a new input signature of `optimize`'s wrapper: the
symbolic capture of its family (the same call but for sizes) when the
guards it recorded admit these sizes, a new symbolic one when the
`dynamic_shapes` policy asks for one, else a capture of these shapes alone
(shape_family.py says how a symbolic capture plans each size)."""
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn

from echo_torch import capture as capture_lib, shape_family
from echo_torch.hook_common import _signature
from echo_torch.log import logger
from echo_torch.shape_family import SymbolicCaptureError


class CaptureChoice:
    """Per family (a signature without its shapes, and the step's mode): its
    symbolic capture (None: tried and failed) and the input shapes of its
    first capture made without one."""

    def __init__(self, module: nn.Module, compiler: str, policy):
        shape_family.check_policy(policy)
        self.module = module
        self.compiler = compiler
        # Symbolic sizes run the eager compiler's programs only.
        self.policy = policy if compiler == "eager" else False
        if self.policy is not False and not shape_family.supported():
            logger.info("echo_torch: torch %s cannot say whether a backward keeps its "
                        "graph; one capture per input shape", torch.__version__)
            self.policy = False
        self._families: Dict[tuple, Optional[capture_lib.ModuleCapture]] = {}
        self._first_shapes: Dict[tuple, List[tuple]] = {}

    def _family_key(self, mode, args, kwargs) -> tuple:
        return (_signature(args, kwargs, self.module.training, shapes=False), mode)

    def _plain(self, family_key, partitioner, args, kwargs, shapes=None):
        if family_key not in self._first_shapes:
            self._first_shapes[family_key] = (
                shapes or capture_lib.input_shapes(self.module, args, kwargs))
        return capture_lib.capture_module(self.module, partitioner, args, kwargs,
                                          self.compiler)

    def choose(self, mode, partitioner: Callable, args, kwargs):
        family_key = self._family_key(mode, args, kwargs)
        family = self._families.get(family_key)
        if family is not None and family.accepts(args, kwargs):
            return family
        dims = shapes = None
        if family_key not in self._families and self.policy is not False:
            shapes = capture_lib.input_shapes(self.module, args, kwargs)
            first = self._first_shapes.get(family_key)
            if self.policy is True:
                dims = shape_family.all_dims(shapes)
            elif first is not None:
                dims = shape_family.changed_dims(first, shapes)
                # A size of 0 or 1 would be specialized by the trace: the
                # family waits for a call that can make it symbolic.
                if any(shapes[i][d] < 2 for i, ds in enumerate(dims) for d in ds):
                    dims = None
        if dims is not None and any(dims):
            family = capture_lib.capture_module(self.module, partitioner, args, kwargs,
                                                self.compiler, dims)
            self._families[family_key] = family
            return family
        return self._plain(family_key, partitioner, args, kwargs, shapes)

    def run_first(self, mode, partitioner: Callable, args, kwargs, start: Callable):
        """(capture, output) of a signature's first call: start(capture) runs
        it. A symbolic capture that fails as such (a trace that symbolic
        sizes break, a shape it cannot make concrete) is given up for its
        family, and the call gets a capture of its own shape; other
        failures (echod's, the model's) are the call's, as for any capture."""
        capture = self.choose(mode, partitioner, args, kwargs)
        if capture.family is None:
            return capture, start(capture)
        try:
            return capture, start(capture)
        except Exception as error:  # noqa: BLE001 - the shape's own capture follows
            if capture.family.traced and not isinstance(error, SymbolicCaptureError):
                raise
            logger.warning("echo_torch: the capture with symbolic sizes failed (%s: %s); "
                           "%s gets one capture per input shape", type(error).__name__,
                           error, type(self.module).__name__)
            family_key = self._family_key(mode, args, kwargs)
            self._families[family_key] = None
            capture = self._plain(family_key, partitioner, args, kwargs)
            return capture, start(capture)
