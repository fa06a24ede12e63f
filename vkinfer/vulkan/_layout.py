"""Moved to vkinfer/layout.py (one definition of every tensor form); kept for callers not yet moved."""

from ..layout import (  # noqa: F401
    as_bytes,
    ceil4,
    from_packed,
    nchw_to_packed,
    packed_to_nchw,
    packed_words,
    pad_last,
    rows_to_packed,
    to_packed,
)
