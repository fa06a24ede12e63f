"""Compatibility module: the TFLite importer lives in the package vkinfer/model/tflite/ (reader, op table,
subgraphs, importer). This keeps the names callers import from here."""

from __future__ import annotations

from .tflite import StateVariable, import_tflite, is_tflite
from .tflite.builder import act_range as _act_range
from .tflite.ops import needs as _needs
from .tflite.reader import DTYPES as _DTYPES
from .tflite.reader import parse as _parse
from .tflite.reader import parse_all as _parse_all

__all__ = ["StateVariable", "_DTYPES", "_act_range", "_needs", "_parse", "_parse_all", "import_tflite", "is_tflite"]
