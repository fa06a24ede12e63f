"""Pure-numpy reference ops: the executable definition of vkinfer's numerics (one file per op)."""

from .qlinear_conv import qlinear_conv
from .qlinear_matmul import qlinear_matmul
from .requant import multiplier, requantize

__all__ = ["qlinear_conv", "qlinear_matmul", "multiplier", "requantize"]
