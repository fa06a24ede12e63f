"""Importing this registers every CPU lowering (each lives in its op's file). Order matters where two files
lower one op type: QLinearAdd of equal shapes takes ORT's float arithmetic before the table; the channel
shuffle is tried before the general reshape of a Transpose."""

from . import (  # noqa: F401
    average_pool,
    byte_gather,  # the general form of the moves: registered as a fallback, tried after the specialised ones
    max_pool,
    pad,
    qadd,  # (not qlinear_add.py: the package's op-level function vkinfer.cpu.qlinear_add has that name)
    qlinear_concat,
    qlinear_conv,
    qlinear_global_average_pool,
    qlinear_lut,
    qlinear_matmul,
    quantize_linear,
    reshape,
    tflite_add,
    tflite_softmax,
    zero_insert,
)
