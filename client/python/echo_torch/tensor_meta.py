"""What the converter reads of a value: shape, dtype and strides (from FX
metadata, or by running the op on meta tensors), and the bytes of the
storage a dense tensor of that layout needs."""
import dataclasses
from typing import List, Optional, Tuple

import torch
import torch.fx as fx

from echo_torch import proto

_pb = proto.graph_pb2

DTYPES = {
    torch.float32: _pb.DTYPE_FLOAT32,
    torch.float16: _pb.DTYPE_FLOAT16,
    torch.bfloat16: _pb.DTYPE_BFLOAT16,
    torch.float64: _pb.DTYPE_FLOAT64,
    torch.int64: _pb.DTYPE_INT64,
    torch.int32: _pb.DTYPE_INT32,
    torch.int16: _pb.DTYPE_INT16,
    torch.int8: _pb.DTYPE_INT8,
    torch.uint8: _pb.DTYPE_UINT8,
    torch.bool: _pb.DTYPE_BOOL,
    torch.complex64: _pb.DTYPE_COMPLEX64,
}


@dataclasses.dataclass
class TensorMeta:
    shape: Tuple[int, ...]
    dtype: torch.dtype
    stride: Tuple[int, ...]


def storage_bytes(meta: TensorMeta) -> int:
    """Bytes of the storage a dense op output needs (strided layouts too)."""
    if any(s == 0 for s in meta.shape):
        return 0
    elements = 1 + sum((s - 1) * st for s, st in zip(meta.shape, meta.stride))
    return elements * torch.empty((), dtype=meta.dtype).element_size()


def meta_of_value(value) -> Optional[TensorMeta]:
    if isinstance(value, torch.Tensor):
        return TensorMeta(tuple(value.shape), value.dtype, tuple(value.stride()))
    return None


def node_meta(node: fx.Node) -> Optional[TensorMeta]:
    tm = node.meta.get("tensor_meta")
    if tm is not None and hasattr(tm, "shape"):
        return TensorMeta(tuple(tm.shape), tm.dtype, tuple(tm.stride))
    return meta_of_value(node.meta.get("val"))


def infer_output_metas(node: fx.Node) -> Optional[List[Optional[TensorMeta]]]:
    """All outputs of a multi-output op, by running it on meta tensors (FX
    records metadata only for outputs that some getitem reads)."""
    def to_meta(arg):
        meta = node_meta(arg)
        if meta is None:
            raise ValueError(f"no metadata for {arg}")
        return torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype,
                                   device="meta")
    try:
        args = fx.node.map_arg(node.args, to_meta)
        kwargs = fx.node.map_arg(node.kwargs, to_meta)
        out = node.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - any failure means "unknown"
        return None
    if isinstance(out, (tuple, list)):
        return [meta_of_value(v) for v in out]
    return [meta_of_value(out)]


def shape_of(arg):
    meta = node_meta(arg) if isinstance(arg, fx.Node) else None
    return meta.shape if meta is not None else None


def output_metas(node, meta, getitems, views):
    """(multi, per-output metas) of a call node: several outputs when the
    node has no single meta and is read through getitems or returns many
    (`views`: ops.aliasing's per-return view flags, None when unknown)."""
    multi = meta is None and (bool(getitems) or views is None or len(views) > 1)
    if not multi:
        return False, [meta]
    metas = infer_output_metas(node) or []
    count = max([len(metas)] + [i + 1 for i in getitems])
    out_metas = [metas[i] if i < len(metas) else None for i in range(count)]
    for i, g in getitems.items():
        out_metas[i] = node_meta(g) or out_metas[i]
    return True, out_metas
