"""MaxPool's definition shared by the devices' lowerings (issue 24: an op's definition in ops/<op>.py)."""

from __future__ import annotations


def pool_attrs(node) -> tuple | None:
    """(kernel, strides, dilations, pads) of a 2-D MaxPool with explicit pads, else None."""
    a = node.attrs
    k = tuple(int(v) for v in a["kernel_shape"])
    st = tuple(int(v) for v in a.get("strides") or (1, 1))
    di = tuple(int(v) for v in a.get("dilations") or (1, 1))
    pads = tuple(int(v) for v in a.get("pads") or (0, 0, 0, 0))
    if len(k) != 2 or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None
    return k, st, di, pads
