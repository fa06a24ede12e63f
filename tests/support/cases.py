"""Test inputs: seeded random quantized tensors and the edge-case shape table for convolutions.

Each case is a dict of qlinear_conv keyword arguments (all devices take the same ones).
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import strategies as st

QT = {"u8": np.uint8, "s8": np.int8}


def qrand(rng: np.random.Generator, shape, dtype, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


def conv_case(rng, *, n=1, c, h, w, m, kh, kw=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
              group=1, xt="u8", wt="s8", per_channel=True, activation=None, mode="random"):
    """One qlinear_conv call's arguments.

    mode: "random"  - scales chosen so outputs spread over the range;
          "saturate"- tiny y_scale: outputs pile up at both ends of the range;
          "ties"    - power-of-two scales, so float32(acc) * m lands exactly on .5 often;
          "bigacc"  - inputs near the top of their range so |acc| exceeds 2**24.
    """
    kw = kh if kw is None else kw
    xdt, wdt = QT[xt], QT[wt]
    cg = c // group
    k = cg * kh * kw
    if mode == "bigacc":
        x = qrand(rng, (n, c, h, w), xdt, np.iinfo(xdt).max - 8, np.iinfo(xdt).max)
        wq = qrand(rng, (m, cg, kh, kw), wdt, np.iinfo(wdt).max - 8, np.iinfo(wdt).max)
        xzp, wzp = np.iinfo(xdt).min, np.full(m, np.iinfo(wdt).min)
    elif mode == "ties":
        # Values within +-3 of their zero points and multipliers 2**-1..2**-3: small accumulators
        # whose products land exactly on .5 for a large share of outputs.
        xzp = int(qrand(rng, (), xdt, np.iinfo(xdt).min + 3, np.iinfo(xdt).max - 3))
        x = (xzp + rng.integers(-3, 4, (n, c, h, w))).astype(xdt)
        wzp = rng.integers(np.iinfo(wdt).min + 3, np.iinfo(wdt).max - 3, m).astype(np.int64)
        wq = (wzp[:, None, None, None] + rng.integers(-3, 4, (m, cg, kh, kw))).astype(wdt)
    else:
        x = qrand(rng, (n, c, h, w), xdt)
        wq = qrand(rng, (m, cg, kh, kw), wdt)
        xzp = int(qrand(rng, (), xdt))
        wzp = qrand(rng, (m,), wdt).astype(np.int64) if rng.random() < 0.7 else np.zeros(m, np.int64)
    if mode == "ties":
        x_scale = np.float32(2.0**-4)
        w_scale = (np.float32(2.0) ** -rng.integers(2, 5, size=m)).astype(np.float32)
        y_scale = np.float32(2.0**-5)
    else:
        x_scale = np.float32(rng.uniform(0.005, 0.05))
        w_scale = rng.uniform(0.001, 0.02, size=m).astype(np.float32)
        typical = np.sqrt(k) * 128 * 100 * float(x_scale) * float(w_scale.mean())
        y_scale = np.float32(typical / 64 if mode in ("random", "ties") else typical / 4096)
        if mode == "bigacc":
            y_scale = np.float32(float(x_scale) * float(w_scale.max()) * k * 250 * 250 / 200)
    if not per_channel:
        w_scale, wzp = w_scale[:1].reshape(()), wzp[:1].reshape(())
    yt = wt if xt == wt else xt
    ydt = QT[yt]
    y_zp = int(qrand(rng, (), ydt, np.iinfo(ydt).min // 2 + 64, np.iinfo(ydt).max // 2 + 64))
    bmax = 50 if mode == "ties" else 20000
    bias = rng.integers(-bmax, bmax, size=m).astype(np.int32) if rng.random() < 0.8 else None
    return dict(x=x, x_scale=x_scale, x_zero_point=xdt(xzp), w=wq, w_scale=w_scale,
                w_zero_point=np.asarray(wzp).astype(wdt), y_scale=y_scale, y_zero_point=ydt(y_zp), bias=bias,
                strides=strides, pads=pads, dilations=dilations, group=group, activation=activation)


CHANNELS = [1, 3, 4, 5, 8, 15, 16, 17, 33, 64]
KERNELS = [1, 3, 5, 7]
STRIDES = [1, 2, 3]
DILATIONS = [1, 2]


def conv_table(seed: int = 0) -> list[tuple[str, dict]]:
    """The edge-case table: (id, kwargs). Every channel count meets every kernel size; strides,
    dilations, groups, asymmetric pads, types, per-channel/per-tensor and modes rotate through."""
    rng = np.random.default_rng(seed)
    cases = []
    types = [("u8", "s8"), ("u8", "u8"), ("s8", "s8"), ("s8", "u8")]
    modes = ["random", "random", "saturate", "ties"]
    for i, (c, k) in enumerate(itertools.product(CHANNELS, KERNELS)):
        s = STRIDES[i % 3]
        d = DILATIONS[(i // 3) % 2] if k > 1 else 1
        ek = (k - 1) * d + 1
        pads = tuple(int(v) for v in rng.integers(0, k, 4))  # asymmetric, up to kernel-1
        h = int(rng.integers(max(1, ek - pads[0] - pads[2]), ek + 9)) | 1  # odd sizes
        w = int(rng.integers(max(1, ek - pads[1] - pads[3]), ek + 11)) | 1
        h, w = max(h, ek - pads[0] - pads[2]), max(w, ek - pads[1] - pads[3])
        xt, wt = types[i % 4]
        mode = modes[(i // 4) % 4]
        pc = i % 3 != 0
        for group, m in [(1, [1, 5, 8, 17, 32][i % 5]), (2, 2 * (1 + i % 5)), (c, c)]:
            if c % group or (group == 2 and c == 1):
                continue
            gname = "dw" if group == c and c > 1 else f"g{group}"
            cases.append((f"c{c}-k{k}-s{s}-d{d}-{gname}-m{m}-p{''.join(map(str, pads))}-{xt}{wt}-{mode}",
                          conv_case(rng, c=c, h=h, w=w, m=m, kh=k, strides=(s, s), pads=pads, dilations=(d, d),
                                    group=group, xt=xt, wt=wt, per_channel=pc, mode=mode)))
    # Specialised kernels with the shapes of real models.
    for c in CHANNELS:
        for s in (1, 2):
            # Each channel count with both weight types (one per stride); with the input type following c % 3,
            # all four u8/s8 combinations occur.
            xt, wt = "u8" if c % 3 else "s8", "u8" if (c + s) % 2 else "s8"
            cases.append((f"dw3x3-c{c}-s{s}-{xt}{wt}", conv_case(rng, n=2 if c == 5 else 1, c=c, h=13, w=11, m=c,
                                                                 kh=3, strides=(s, s), pads=(1, 1, 1, 1), group=c,
                                                                 per_channel=c % 2 == 0, xt=xt, wt=wt)))
        for s in (1, 2, 3):
            m = [1, 4, 7, 24, 33, 64][c % 6]
            cases.append((f"pw-c{c}-m{m}-s{s}", conv_case(rng, n=1 + (c == 17), c=c, h=9, w=15, m=m, kh=1,
                                                          strides=(s, s), xt="u8" if c % 2 else "s8",
                                                          wt="s8" if c % 3 else "u8")))
    # Large K: accumulators beyond 2**24 (float32 can no longer hold them exactly).
    for name, kw_ in [("gemm", dict(c=520, m=8, kh=1, h=5, w=5)), ("conv", dict(c=64, m=8, kh=3, h=5, w=5)),
                      ("conv7", dict(c=33, m=5, kh=7, h=7, w=9))]:
        for xt, wt in [("u8", "u8"), ("s8", "s8"), ("u8", "s8")]:
            cases.append((f"bigacc-{name}-{xt}{wt}", conv_case(rng, **kw_, xt=xt, wt=wt, mode="bigacc")))
    # Fused activations.
    for act in ["relu", "relu6", ("clip", -0.5, 1.5)]:
        cases.append((f"act-{act}", conv_case(rng, c=8, h=9, w=9, m=12, kh=3, pads=(1, 1, 1, 1), activation=act)))
    return cases


def mm_case(rng, a_shape, b_shape, at="u8", bt="s8", per_column=True, mode="random"):
    adt, bdt = QT[at], QT[bt]
    k, n = b_shape[-2], b_shape[-1]
    a, b = qrand(rng, a_shape, adt), qrand(rng, b_shape, bdt)
    azp = adt(qrand(rng, (), adt))
    bzp = qrand(rng, (n,), bdt) if per_column else bdt(qrand(rng, (), bdt))
    a_scale = np.float32(rng.uniform(0.005, 0.05))
    b_scale = rng.uniform(0.001, 0.02, n).astype(np.float32) if per_column else np.float32(0.01)
    typical = np.sqrt(k) * 128 * 100 * float(a_scale) * float(np.mean(b_scale))
    y_scale = np.float32(typical / (64 if mode == "random" else 4096))
    ydt = QT[at]
    return dict(a=a, a_scale=a_scale, a_zero_point=azp, b=b, b_scale=b_scale, b_zero_point=bzp,
                y_scale=y_scale, y_zero_point=ydt(qrand(rng, (), ydt)))


MM_SHAPES = [
    ((1, 1), (1, 1)), ((1, 3), (3, 1)), ((5, 7), (7, 9)), ((17, 33), (33, 15)), ((33, 64), (64, 17)),
    ((64, 5), (5, 64)), ((4, 1280), (1280, 1000)), ((2, 3, 8, 16), (16, 4)),  # batch, shared b
    ((3, 9, 20), (3, 20, 11)),  # batched b
    ((2, 1, 6, 7), (1, 3, 7, 5)),  # broadcast both ways
    ((40, 2100), (2100, 6)),  # |acc| can pass 2**24
]


@st.composite
def conv_args(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    group_kind = draw(st.sampled_from(["g1", "g", "dw"]))
    cg = draw(st.integers(1, 12))
    g = 1 if group_kind == "g1" else draw(st.integers(2, 4))
    c = cg * g
    if group_kind == "dw":
        g, c, cg = c, c, 1
    m = c if group_kind == "dw" else g * draw(st.integers(1, 6))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, (kh - 1) * d[0] + 1 - pads[0] - pads[2]), 14))
    w = draw(st.integers(max(1, (kw - 1) * d[1] + 1 - pads[1] - pads[3]), 14))
    xt, wt = draw(st.sampled_from([("u8", "s8"), ("u8", "u8"), ("s8", "s8"), ("s8", "u8")]))
    return conv_case(rng, n=draw(st.integers(1, 2)), c=c, h=h, w=w, m=m, kh=kh, kw=kw, strides=s, pads=pads,
                     dilations=d, group=g, xt=xt, wt=wt, per_channel=draw(st.booleans()),
                     mode=draw(st.sampled_from(["random", "saturate", "ties"])))
