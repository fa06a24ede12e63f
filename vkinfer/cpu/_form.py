"""Moved to vkinfer/layout.py (one definition of every tensor form); kept for callers not yet moved."""

from ..layout import canonical, flip, form_shape, is_8bit, same_bytes, table1, table2, u32, unform_perm  # noqa: F401
