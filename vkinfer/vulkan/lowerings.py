"""Importing this registers every Vulkan lowering (each lives in its op's file). Order matters where two files
lower one op type: the channel shuffle is tried before the general reshape of a Transpose."""

from . import (  # noqa: F401
    byte_gather,  # the general form of the moves: registered as a fallback, tried after the specialised ones
    channel_gather,
    max_pool,
    qlinear_concat,
    qlinear_conv,
    qlinear_global_average_pool,
    qlinear_lut,
    qlinear_matmul,
    repack,
    tflite_average_pool,
)
