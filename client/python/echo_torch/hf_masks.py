"""Hugging Face's attention masks traced as eager builds them.

In eager, transformers' mask code looks at the data: a 2D attention mask of
all ones (or none) lets SDPA run with `is_causal` and no mask at all, and
position ids that count up without a break are not packed sequences. While
the hook traces, the code cannot look (the tensors are fake, and
`torch.compiler.is_compiling()` is true), so it builds a [batch, 1, length,
length] mask that eager never makes: bytes held for the backward, and a
masked attention kernel in place of the causal one.

The hook looks instead, on the call's real tensors (as eager does at every
step: one reduction per mask), and keys the capture on what it saw
(`facts`). While a call whose masks are all ones and whose positions are not
packed is traced, `as_eager` tells transformers so: its skip checks get no
padding mask, and its packed-sequence detection finds none. A call with
padding or packed positions is traced as before, with the mask.
"""
import contextlib
import sys
from typing import Optional, Tuple

import torch

# masking_utils functions whose answers depend on the data (transformers 5).
_PADDING_CHECKS = ("_ignore_causal_mask_sdpa", "_ignore_bidirectional_mask_sdpa")
_PACKED_CHECK = "find_packed_sequence_indices"


def _real(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type != "meta"


def _counts_up(position_ids: torch.Tensor) -> bool:
    """transformers' test: no position (after the first) that is not the
    one before plus one."""
    if position_ids.dim() == 0 or position_ids.shape[-1] < 2:
        return True
    return bool((position_ids[..., 1:] - position_ids[..., :-1] == 1).all())


def facts(args, kwargs) -> Optional[Tuple[str, ...]]:
    """What the eager mask code would see in this call: ("unpadded",
    "unpacked") when every `*attention_mask` keyword is all ones (or absent)
    and `position_ids` (if given) counts up; None when transformers is not
    loaded, a mask is not all ones, positions are packed, or a tensor is on
    the meta device (nothing to look at)."""
    if "transformers.masking_utils" not in sys.modules:
        return None
    for name, value in kwargs.items():
        if value is None or not name.endswith("attention_mask"):
            continue
        if not _real(value) or value.dim() != 2 or not bool(value.all()):
            return None
    position_ids = kwargs.get("position_ids")
    if position_ids is not None and (not _real(position_ids) or not _counts_up(position_ids)):
        return None
    return ("unpadded", "unpacked")


@contextlib.contextmanager
def as_eager(seen: Optional[Tuple[str, ...]]):
    """While a call with `seen` facts is traced: transformers' padding checks
    get no padding mask (all ones is no padding) and its packed-sequence
    detection returns None, as they would in eager."""
    masking = sys.modules.get("transformers.masking_utils")
    if seen is None or masking is None:
        yield
        return
    saved = {name: getattr(masking, name) for name in _PADDING_CHECKS + (_PACKED_CHECK,)
             if hasattr(masking, name)}

    def without_padding(check):
        def checked(padding_mask, *args, **kwargs):
            return check(None, *args, **kwargs)
        return checked

    try:
        for name in _PADDING_CHECKS:
            if name in saved:
                setattr(masking, name, without_padding(saved[name]))
        if _PACKED_CHECK in saved:
            setattr(masking, _PACKED_CHECK, lambda position_ids: None)
        yield
    finally:
        for name, function in saved.items():
            setattr(masking, name, function)
