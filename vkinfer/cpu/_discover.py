"""Importing this module (model.lowering does, on first use) registers every CPU lowering: each lives in its op's file
(vkinfer/cpu/<op>.py, `@lower("cpu", ...)`), found by name: every module of the package is imported, in name order,
so a new op's file needs no line here. Where two files lower one op type, registration order decides, then
`fallback=True` puts a general form last: QLinearAdd of equal shapes takes ORT's float arithmetic (qlinear_add.py)
before the table (qlinear_lut.py, a fallback); byte_gather.py, the general form of the moves, is a fallback too."""

import importlib
import pkgutil

from . import __path__ as _path

# Names are sorted so the order is the same on every filesystem; private modules (_*) are helpers.
MODULES = sorted(m.name for m in pkgutil.iter_modules(_path) if not m.name.startswith("_"))
for _name in MODULES:
    importlib.import_module(f"{__package__}.{_name}")
