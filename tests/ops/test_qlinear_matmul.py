"""QLinearMatMul with constant B (vkinfer/cpu/qlinear_matmul.py, vkinfer/vulkan/qlinear_matmul.py) against ONNX
Runtime on every device, which must run the node itself: odd M, K, N (K = 1, N = 1, M < 8 for the GEMV kernel),
batched 3-D A over a shared or a batched B, per-tensor and per-column B parameters, u8 x u8, u8 x s8, s8 x s8,
accumulators past 2**24, a transformer's projections. A broadcast over B's batch (4-D A) with constant B runs on the
host. Both operands activations (attention: slider_yoloseg's Q x K^T and P x V) run on the devices (the C qmatmul
operator, shaders/qlinear_matmul_act.comp) with numpy-broadcast batch axes, K = 1, 2-D to 4-D (5-D: the CPU graph
in a Vulkan session).

ORT's u8 x s8 kernel saturates int16 pair sums on x86 without VNNI (tests/support/ort_oracle.py): there, u8 x s8
operands are drawn 7-bit (ORT's reduce_range remedy), as tests/numerics/test_reference_vs_ort.py does."""

from __future__ import annotations

import numpy as np
import pytest
from support import ort_oracle as oo

from ._build import check, model, node, ort_run, qrand, qrange, refused

T = {"u8": np.uint8, "s8": np.int8}


def _table() -> list[tuple]:
    """(id, A shape, B shape, (a type, b type), per_column)."""
    cases = []
    types = [("u8", "u8"), ("u8", "s8"), ("s8", "s8")]
    for i, (m, k, n) in enumerate([(1, 17, 5), (3, 1, 9), (7, 33, 1), (9, 64, 40), (16, 5, 3), (33, 15, 17)]):
        cases.append((f"m{m}k{k}n{n}", (m, k), (k, n), types[i % 3], i % 2 == 1))
    cases += [
        ("batched_a_shared_b", (3, 5, 12), (12, 7), ("u8", "s8"), True),
        ("batched_a_batched_b", (2, 4, 9), (2, 9, 6), ("s8", "s8"), False),
        ("vit_qkv", (1, 50, 64), (64, 192), ("u8", "s8"), True),
        ("bigacc_k600", (2, 600), (600, 3), ("u8", "u8"), False),
        ("melspec_a4d_c1", (1, 1, 8, 257), (257, 32), ("u8", "s8"), True),  # oww_melspec's mel filter bank
        ("a4d_c1_m1", (1, 1, 1, 9), (9, 4), ("s8", "s8"), False),
    ]
    return cases


TABLE = _table()


def _case(cid, sa, sb, types, per_column, a_input=True):
    rng = np.random.default_rng(sum(map(ord, cid)))
    at, bt = T[types[0]], T[types[1]]
    seven = oo.u8s8_behaviour() != oo.EXACT and types == ("u8", "s8")
    a = qrand(rng, sa, at)
    b = qrand(rng, sb, bt) if not seven else rng.integers(-64, 64, sb).astype(np.int8)
    n = sb[-1]
    pshape = (n,) if per_column and len(sb) == 2 else ()
    bs = rng.uniform(0.001, 0.02, pshape).astype(np.float32)
    blo, bhi = qrange(bt) if not seven else (-64, 63)
    bz = rng.integers(blo, bhi + 1, pshape).astype(bt)
    k = sa[-1]
    ys = np.float32(np.sqrt(k) * 60 * 0.02 * float(np.mean(bs)))
    if cid.startswith("bigacc"):
        a[...], b[...] = qrange(at)[1], qrange(bt)[1]
    consts = {"as": np.float32(0.02), "az": np.asarray(qrand(rng, (), at)), "b": b, "bs": bs, "bz": bz, "ys": ys,
              "yz": np.asarray(qrand(rng, (), at))}
    blob = model([node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"])], {"a": (at, sa)}, consts,
                 {"y": at})
    return blob, {"a": a}


@pytest.mark.parametrize("cid,sa,sb,types,per_column", TABLE, ids=[c[0] for c in TABLE])
def test_qlinear_matmul_equals_ort_on_every_device(cid, sa, sb, types, per_column):
    blob, feed = _case(cid, sa, sb, types, per_column)
    # A (1, 1, m, k): Vulkan's packed form pads its one channel to a word per pixel, so the CPU graph takes it.
    check(blob, feed, ort_run(blob, feed), on_vulkan="cpu" if len(sa) == 4 else None)


def test_a_broadcast_over_b_batch_runs_on_the_host():
    blob, feed = _case("bcast", (2, 3, 4, 8), (8, 5), ("u8", "u8"), False)
    check(blob, feed, ort_run(blob, feed), where="host")


@pytest.mark.parametrize("change,culprit", [
    (dict(bs=np.float32(0)), "scale"),
    (dict(ys=np.float32(-0.5)), "scale"),
    (dict(bs=np.full(3, 0.01, np.float32), bz=np.zeros(3, np.uint8)), "b_scale|scale|column|shape"),
    (dict(b=np.zeros((7, 5), np.uint8)), "last dimension"),
], ids=["b_scale_zero", "y_scale_negative", "b_params_count", "k_mismatch"])
def test_bad_qlinear_matmul_refused_naming_the_node(change, culprit):
    consts = {"as": np.float32(0.02), "az": np.uint8(3), "b": np.zeros((8, 5), np.uint8), "bs": np.float32(0.01),
              "bz": np.uint8(0), "ys": np.float32(0.1), "yz": np.uint8(0)} | change
    blob = model([node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"])],
                 {"a": (np.uint8, (3, 8))}, consts)
    refused(blob, {"a": np.zeros((3, 8), np.uint8)}, culprit)


ACT_TABLE = [  # (id, A shape, B shape, (a type, b type), where on vulkan)
    ("yoloseg_qk", (1, 4, 400, 32), (1, 4, 32, 400), ("u8", "u8"), "vulkan"),
    ("yoloseg_pv", (1, 4, 64, 400), (1, 4, 400, 400), ("u8", "u8"), "vulkan"),
    ("heads_b_broadcast", (2, 3, 5, 7), (1, 3, 7, 6), ("s8", "s8"), "vulkan"),
    ("a_broadcast_over_b", (2, 1, 5, 7), (3, 7, 6), ("u8", "s8"), "vulkan"),
    ("a_2d_b_3d", (5, 7), (2, 7, 6), ("u8", "u8"), "vulkan"),
    ("k1", (9, 1), (1, 4), ("s8", "s8"), "vulkan"),
    ("bigacc_k700", (2, 700), (700, 3), ("u8", "u8"), "vulkan"),
    ("r5_batch", (2, 1, 3, 4, 5), (1, 2, 1, 5, 3), ("u8", "u8"), "cpu"),
]


# Tile edges of the C operator's blocked path (m, n, k around 1, 7, 16, 32, 64 against MR 2-14, NR 4-32, KR 1-4),
# broadcast batches, and B's values: "full" bytes (the int16 kernel), "fit" (every b - b_zp in [-128, 127], both ends:
# the u8s8 kernel on AVX-512 VNNI / SDOT), "small" (softmax-like probabilities, zero point 0).
EDGE_TABLE = [  # (id, A shape, B shape, (a type, b type), B values)
    ("e_m1k1n1", (1, 1), (1, 1), ("u8", "u8"), "fit"),
    ("e_m7k16n31", (7, 16), (16, 31), ("s8", "s8"), "full"),
    ("e_m16k31n32", (2, 16, 31), (2, 31, 32), ("u8", "s8"), "fit"),
    ("e_m31k32n33", (3, 31, 32), (1, 32, 33), ("u8", "u8"), "fit"),
    ("e_m32k33n64", (1, 32, 33), (2, 33, 64), ("u8", "u8"), "small"),
    ("e_m33k64n65", (2, 2, 33, 64), (2, 1, 64, 65), ("u8", "u8"), "full"),
    ("e_m64k65n7", (2, 64, 65), (2, 65, 7), ("s8", "s8"), "fit"),
    ("e_m65k7n16", (65, 7), (7, 16), ("u8", "s8"), "full"),
    ("e_heads_pv", (1, 4, 65, 33), (1, 4, 33, 64), ("u8", "u8"), "small"),
]


def _act_case(cid, sa, sb, types, dist="full"):
    rng = np.random.default_rng(sum(map(ord, cid)))
    at, bt = T[types[0]], T[types[1]]
    seven = oo.u8s8_behaviour() != oo.EXACT and types == ("u8", "s8")
    a = qrand(rng, sa, at)
    b = qrand(rng, sb, bt) if not seven else rng.integers(-64, 64, sb).astype(np.int8)
    if cid.startswith("bigacc"):
        a[...], b[...] = qrange(at)[1], qrange(bt)[1]
    bz = np.asarray(qrand(rng, (), bt) if not seven else rng.integers(-64, 64), bt)
    if dist == "small":
        bz = np.asarray(qrange(bt)[0] if bt == np.uint8 else 0, bt)
        b = (rng.integers(0, 24, sb) + int(bz)).astype(bt)
    elif dist == "fit" and not seven:
        lo, hi = max(qrange(bt)[0], int(bz) - 128), min(qrange(bt)[1], int(bz) + 127)
        b = rng.integers(lo, hi + 1, sb).astype(bt)
        b.flat[0], b.flat[-1] = lo, hi
    consts = {"as": np.float32(0.02), "az": np.asarray(qrand(rng, (), at)), "bs": np.float32(0.015), "bz": bz,
              "ys": np.float32(np.sqrt(sa[-1]) * 60 * 0.02 * 0.015), "yz": np.asarray(qrand(rng, (), at))}
    blob = model([node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"])],
                 {"a": (at, sa), "b": (bt, sb)}, consts, {"y": at})
    return blob, {"a": a, "b": b}


@pytest.mark.parametrize("cid,sa,sb,types,on_vulkan", ACT_TABLE, ids=[c[0] for c in ACT_TABLE])
def test_two_activation_matmul_equals_ort_on_every_device(cid, sa, sb, types, on_vulkan):
    blob, feed = _act_case(cid, sa, sb, types)
    check(blob, feed, ort_run(blob, feed), where="cpu", on_vulkan=on_vulkan)


@pytest.mark.parametrize("cid,sa,sb,types,dist", EDGE_TABLE, ids=[c[0] for c in EDGE_TABLE])
def test_two_activation_tile_edges_equal_ort_on_every_device(cid, sa, sb, types, dist):
    blob, feed = _act_case(cid, sa, sb, types, dist)
    check(blob, feed, ort_run(blob, feed), where="cpu", on_vulkan="vulkan")


ASAN_SCRIPT = """
import numpy as np, vkinfer
from ops.test_qlinear_matmul import ACT_TABLE, EDGE_TABLE, _act_case
cases = [(cid, sa, sb, types, "full") for cid, sa, sb, types, _ in ACT_TABLE] + EDGE_TABLE
for cid, sa, sb, types, dist in cases:
    blob, feed = _act_case(cid, sa, sb, types, dist)
    want = vkinfer.InferenceSession(blob, device="reference").run(None, feed)[0]
    got = vkinfer.InferenceSession(blob, device="cpu").run(None, feed)[0]
    assert np.array_equal(want, got), cid
print("asan qmatmul:", len(cases))
"""


def test_qmatmul_operator_under_asan_and_ubsan():
    """The C qmatmul operator under AddressSanitizer + UBSan on every two-activation case (tile edges included),
    against the reference."""
    from .test_qlinear_add import asan_run

    asan_run(ASAN_SCRIPT, "asan qmatmul: ")
