"""Test vectors for the C CPU fallback's driver (cpu_fallback/tests/conv_driver.c).

Each case is a qlinear_conv call; its expected output comes from the numpy reference, converted to
the C library's conventions (vkinfer_cpu.h): NHWC activations, int8 inputs XOR 0x80 with x_zp + 128,
per-channel int32 weight zero points, float32 multipliers, output bytes = the low byte of each result.
The binary format is documented at the top of conv_driver.c.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from support.cases import conv_case, conv_table
from vkinfer.reference import qlinear_conv
from vkinfer.reference._spec import ConvSpec, conv_spec

MAGIC = b"VKICONV\0"
VERSION = 1


def encode_case(name: str, spec: ConvSpec) -> bytes:
    """One case of the vector file: header fields, then weights, w_zp, bias, scale, x and expected y."""
    n, c, h, w = spec.x.shape
    m, _, kh, kw = spec.w.shape
    _, _, oh, ow = spec.out_shape
    x = np.ascontiguousarray(spec.x.transpose(0, 2, 3, 1))  # NCHW -> NHWC
    x_zp = spec.x_zp
    if x.dtype == np.int8:  # the canonical unsigned domain: x + 128, as a bit flip
        x, x_zp = x.view(np.uint8) ^ np.uint8(0x80), x_zp + 128
    y = np.ascontiguousarray(qlinear_conv(spec).transpose(0, 2, 3, 1))
    raw = name.encode()
    if not 0 < len(raw) < 256:
        raise ValueError(f"case name must be 1..255 bytes: {name!r}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = spec.strides, spec.dilations, spec.pads
    header = struct.pack("<I", len(raw)) + raw + struct.pack(
        "<16I5i2I", n, h, w, c, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, spec.group,
        int(spec.w.dtype == np.int8), x_zp, spec.out.zero_point, spec.out.lo, spec.out.hi, oh, ow)
    return b"".join([
        header,
        spec.w.view(np.uint8).tobytes(),  # raw bytes in ONNX layout (M, C/group, kH, kW)
        spec.w_zp.astype("<i4").tobytes(),
        spec.bias.astype("<i4").tobytes(),
        spec.out.m.astype("<f4").tobytes(),
        x.tobytes(),
        y.view(np.uint8).tobytes(),  # int8 -> its two's complement byte = the int32 result's low byte
    ])


def write_vectors(path, cases) -> int:
    """Write (name, qlinear_conv kwargs) cases to `path`; returns the number of cases."""
    blobs = [encode_case(name, conv_spec(**kwargs)) for name, kwargs in cases]
    Path(path).write_bytes(MAGIC + struct.pack("<2I", VERSION, len(blobs)) + b"".join(blobs))
    return len(blobs)


def extra_cases(seed: int = 1) -> list[tuple[str, dict]]:
    """Shapes the Vulkan table does not stress but the CPU's tiling and indirection do."""
    rng = np.random.default_rng(seed)
    cases = []
    # Matmul-shaped: a 1x1 convolution over one image row is a (rows x K) @ (K x N) GEMM.
    for i, (rows, k, n) in enumerate([(1, 1, 1), (1, 64, 10), (3, 7, 5), (5, 33, 100), (17, 16, 17),
                                      (64, 520, 24), (2, 300, 7), (37, 24, 64)]):
        xt, wt = [("u8", "s8"), ("s8", "s8"), ("u8", "u8"), ("s8", "u8")][i % 4]
        cases.append((f"matmul-r{rows}-k{k}-n{n}-{xt}{wt}",
                      conv_case(rng, c=k, h=1, w=rows, m=n, kh=1, xt=xt, wt=wt, per_channel=i % 2 == 0)))
    cases.append(("matmul-batch3-r5-k40-n9", conv_case(rng, n=3, c=40, h=1, w=5, m=9, kh=1)))
    # Enough output pixels and channels for every thread to get several row and channel tiles.
    cases.append(("pw-large-c48-m72", conv_case(rng, c=48, h=17, w=19, m=72, kh=1, xt="s8", wt="s8")))
    cases.append(("conv3x3-large-c24-m40", conv_case(rng, c=24, h=15, w=13, m=40, kh=3, pads=(1, 1, 1, 1))))
    cases.append(("dw3x3-c100-s1", conv_case(rng, c=100, h=9, w=7, m=100, kh=3, pads=(1, 1, 1, 1), group=100)))
    cases.append(("dw3x3-c100-s2-u8u8", conv_case(rng, c=100, h=10, w=9, m=100, kh=3, strides=(2, 2),
                                                  pads=(0, 1, 1, 0), group=100, xt="u8", wt="u8")))
    cases.append(("dw5x5-c40-s2", conv_case(rng, c=40, h=11, w=12, m=40, kh=5, strides=(2, 2), pads=(2, 2, 2, 2),
                                            group=40, xt="s8", wt="s8")))
    cases.append(("dw-multiplier2-c6-m12", conv_case(rng, c=6, h=7, w=7, m=12, kh=3, pads=(1, 1, 1, 1), group=6)))
    cases.append(("dw3x3-batch2-c16", conv_case(rng, n=2, c=16, h=6, w=5, m=16, kh=3, pads=(1, 1, 1, 1), group=16)))
    # Rectangular kernels, strides, dilations; pads wider than the kernel (rows made of padding only).
    cases.append(("k1x7-s1x2", conv_case(rng, c=8, h=5, w=13, m=6, kh=1, kw=7, strides=(1, 2), pads=(0, 3, 0, 3))))
    cases.append(("k7x1-d2x1", conv_case(rng, c=5, h=17, w=4, m=9, kh=7, kw=1, dilations=(2, 1), pads=(3, 0, 3, 0))))
    cases.append(("dw-k3x5-s2x1-d1x2", conv_case(rng, c=12, h=9, w=14, m=12, kh=3, kw=5, strides=(2, 1),
                                                 dilations=(1, 2), pads=(1, 2, 0, 3), group=12)))
    cases.append(("pads-beyond-kernel", conv_case(rng, c=3, h=4, w=5, m=4, kh=3, pads=(4, 0, 5, 6))))
    cases.append(("dw-pads-beyond-kernel", conv_case(rng, c=9, h=3, w=3, m=9, kh=3, pads=(3, 4, 3, 2), group=9)))
    cases.append(("pw-padded-s2", conv_case(rng, c=10, h=6, w=7, m=11, kh=1, strides=(2, 2), pads=(1, 1, 2, 0))))
    cases.append(("kernel-covers-input", conv_case(rng, c=7, h=5, w=6, m=3, kh=5, kw=6)))
    # Merged rows past 64 bytes for few channels (1-D STFT-like: 1 channel, kernel 512, stride 160; padded).
    cases.append(("merged-c1-k512-s160", conv_case(rng, c=1, h=1, w=1760, m=20, kh=1, kw=512, strides=(1, 160))))
    cases.append(("merged-c3-k3x90-padded", conv_case(rng, c=3, h=4, w=100, m=5, kh=3, kw=90, strides=(1, 7),
                                                      pads=(1, 30, 1, 11), xt="s8", wt="s8")))
    cases.append(("grouped-g4-c32-m64", conv_case(rng, c=32, h=8, w=9, m=64, kh=3, pads=(1, 1, 1, 1), group=4,
                                                  xt="s8", wt="s8")))
    cases.append(("grouped-g3-c9-m6-s2", conv_case(rng, c=9, h=7, w=8, m=6, kh=3, strides=(2, 2), group=3,
                                                   xt="u8", wt="u8")))
    cases.append(("bigacc-dw5x5-c16", conv_case(rng, c=16, h=6, w=6, m=16, kh=5, pads=(2, 2, 2, 2), group=16,
                                                mode="bigacc")))
    cases.append(("saturate-pw-relu6", conv_case(rng, c=20, h=4, w=4, m=8, kh=1, mode="saturate",
                                                 activation="relu6")))
    cases.append(("ties-dw3x3-c24", conv_case(rng, c=24, h=7, w=7, m=24, kh=3, pads=(1, 1, 1, 1), group=24,
                                              mode="ties", xt="s8", wt="s8")))
    return cases


def limit_weights(rng, case: dict, lim: int = 64, over: bool = False, worst: bool = False) -> dict:
    """`case` with weights rewritten so that every (w - w_zp) lies in [-lim, lim] and +-lim occurs (the
    AVX2 u8s8 kernel takes layers with lim <= 64). Zero points are redrawn so that w_zp +- lim fits the
    weight type (uint8 zero points then lie in [lim, 255 - lim], never 0). over: one weight at lim + 1
    (the layer must fall back to the int16 kernel). worst: every weight at +lim or -lim, one sign per
    output channel, and activations at their maximum: every VPMADDUBSW pair sum is +-255 * 2 * lim."""
    w = case["w"]
    info = np.iinfo(w.dtype)
    m = w.shape[0]
    zp = np.asarray(case["w_zero_point"])
    hi = lim + 1 if over else lim
    zp = rng.integers(info.min + hi, info.max - hi + 1, zp.shape)
    zcol = zp.reshape(-1, 1, 1, 1) if zp.ndim else zp
    if worst:
        d = np.broadcast_to(np.where(np.arange(m) % 2 == 0, lim, -lim).reshape(-1, 1, 1, 1), w.shape).copy()
        x = case["x"]
        case = {**case, "x": np.full_like(x, np.iinfo(x.dtype).max)}
    else:
        d = rng.integers(-lim, lim + 1, w.shape)
        d.flat[rng.integers(d.size)] = lim
        d.flat[rng.integers(d.size)] = -lim
    if over:
        d.flat[rng.integers(d.size)] = (lim + 1) * (1 if rng.random() < 0.5 else -1)
    return {**case, "w": (zcol + d).astype(w.dtype), "w_zero_point": zp.astype(w.dtype)}


def seven_bit_cases(seed: int = 2) -> list[tuple[str, dict]]:
    """Layers with 7-bit weights (|w - w_zp| <= 64, as onnxruntime's reduce_range=True gives), which take
    the AVX2 u8s8 kernel, and the same shapes at 65, which must not: odd K (kc not a multiple of 2, 4 or
    32), M not a multiple of 16, uint8 weights with per-channel zero points, int8 activations, the merged
    RGB stem, grouped and general convolutions, and the largest pair sums VPMADDUBSW can meet."""
    rng = np.random.default_rng(seed)
    shapes = [  # (name, conv_case kwargs)
        ("pw-c37-m23", dict(c=37, h=5, w=7, m=23, kh=1)),
        ("pw-c64-m40", dict(c=64, h=4, w=5, m=40, kh=1)),
        ("pw-c3-m5", dict(c=3, h=3, w=3, m=5, kh=1)),
        ("pw-c130-m17-s2", dict(c=130, h=7, w=6, m=17, kh=1, strides=(2, 2))),
        ("stem-c3-k3-s2", dict(c=3, h=11, w=12, m=9, kh=3, strides=(2, 2), pads=(1, 1, 1, 1))),
        ("conv-c13-k3", dict(c=13, h=6, w=7, m=19, kh=3, pads=(1, 0, 1, 2))),
        ("grouped-g2-c10-m6", dict(c=10, h=5, w=5, m=6, kh=3, group=2, pads=(1, 1, 1, 1))),
        ("matmul-r9-k33-n31", dict(c=33, h=1, w=9, m=31, kh=1)),
    ]
    types = [("u8", "u8"), ("s8", "s8"), ("u8", "s8"), ("s8", "u8")]
    cases = []
    for i, (name, kw) in enumerate(shapes):
        xt, wt = types[i % 4]
        base = conv_case(rng, **kw, xt=xt, wt=wt, per_channel=i != 2)
        cases.append((f"w7-{name}-{xt}{wt}", limit_weights(rng, base)))
        cases.append((f"w7over-{name}-{xt}{wt}", limit_weights(rng, base, over=True)))
    for xt, wt in [("u8", "u8"), ("s8", "s8")]:
        base = conv_case(rng, c=70, h=3, w=5, m=18, kh=1, xt=xt, wt=wt, mode="saturate")
        cases.append((f"w7worst-pw-c70-m18-{xt}{wt}", limit_weights(rng, base, worst=True)))
    return cases


def default_cases() -> list[tuple[str, dict]]:
    """The whole Vulkan edge-case table (every kernel kind, type pair and mode), extra_cases(), the 7-bit
    weight cases, and the table again from another seed (other sizes, pads and data): all of it runs in
    seconds under qemu."""
    return (conv_table() + extra_cases() + seven_bit_cases()
            + [(f"seed1-{name}", case) for name, case in conv_table(seed=1)])


if __name__ == "__main__":  # (cd tests && python -m support.cpu_vectors OUT): vectors for running a driver by hand
    import sys

    print(write_vectors(sys.argv[1], default_cases()), "cases written to", sys.argv[1])
