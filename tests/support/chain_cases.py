"""A chain of dependent convolutions over every kernel variant, and its reference evaluation."""

from __future__ import annotations

import dataclasses

import numpy as np

from support.cases import conv_case
from vkinfer.reference import qlinear_conv
from vkinfer.reference._spec import ConvSpec, conv_spec


def chain_specs(depth: int = 24, seed: int = 0) -> list[ConvSpec]:
    """`depth` shape-preserving layers (16 channels, 11x13, uint8 activations) cycling through
    1x1 GEMM, depthwise 3x3, depthwise 5x5, grouped 3x3, dilated 3x3 and strided-then-restored."""
    rng = np.random.default_rng(seed)
    kinds = [
        dict(kh=1),
        dict(kh=3, pads=(1, 1, 1, 1), group=16),
        dict(kh=5, pads=(2, 2, 2, 2), group=16),
        dict(kh=3, pads=(1, 1, 1, 1), group=4),
        dict(kh=3, pads=(2, 2, 2, 2), dilations=(2, 2)),
        dict(kh=3, pads=(0, 1, 2, 1)),
    ]
    specs = []
    for i in range(depth):
        kw = dict(kinds[i % len(kinds)])
        specs.append(conv_spec(**conv_case(rng, c=16, h=11, w=13, m=16, xt="u8", wt="s8",
                                           activation="relu" if i % 2 else None, **kw)))
    return specs


def chain_reference(specs: list[ConvSpec], x: np.ndarray) -> np.ndarray:
    for s in specs:
        x = qlinear_conv(dataclasses.replace(s, x=x))
    return x
