"""TFLite ops of streaming and field int8 models, one small model per op, against ai-edge-litert 2.3.0's default
interpreter (XNNPACK where it takes the op), on every device.

Data movement (STRIDED_SLICE, SPLIT, SPLIT_V, PACK, UNPACK, SQUEEZE, GATHER, DEPTH_TO_SPACE,
RESIZE_NEAREST_NEIGHBOR, CONCATENATION on any axis) only moves bytes: exact by construction, checked on seeded
random tensors. Elementwise ops are tables of TFLite's arithmetic (vkinfer/reference/tflite_elementwise.py,
tflite_hard_swish.py): checked on every input byte (unary) and every byte pair (SUB, MAXIMUM, MINIMUM), over
several seeded quantization parameter sets, int8 and uint8. Every model gives identical bits on the reference, cpu
and vulkan devices (tests/support/agree.py), equal to litert's.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import outcome_devices, run_devices

import vkinfer
from vkinfer.testing import tflite_zoo


def _random(shape, dtype, rng):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


def _compare(blob: bytes, feed: dict, what: str, sess: vkinfer.InferenceSession | None = None) -> None:
    """Every output identical on every device and to litert's; `sess` (any device) gives the output names."""
    want = tflite_zoo.litert_run(blob, feed)
    sess = sess or vkinfer.InferenceSession(blob, device="reference")
    names = [o.name for o in sess.get_outputs()]
    assert sorted(names) == sorted(want), what
    try:
        run_devices(blob, feed, want=[want[n] for n in names], output_names=names)
    except AssertionError as e:
        e.add_note(f"case: {what}, outputs {names}")  # which seed / parameters, as the old err_msg said
        raise


MOVES = [
    ("strided_slice", dict(shape=(1, 6, 5, 8), begin=[0, 1, -4, 1], end=[1, 6, 5, 8], strides=[1, 2, 1, 3],
                           out_shape=(1, 3, 4, 3))),
    ("strided_slice", dict(shape=(1, 6, 5, 8), begin=[0, -1, 0, 7], end=[1, 0, 5, 0], strides=[1, -2, 2, -2],
                           BeginMask=0b0100, EndMask=0b1000, out_shape=(1, 3, 3, 4))),
    ("strided_slice", dict(shape=(1, 6, 5, 8), begin=[0, 2, 0, 0], end=[1, 3, 5, 8], strides=[1, 1, 1, 1],
                           ShrinkAxisMask=0b0011, BeginMask=0b1100, EndMask=0b1100, out_shape=(5, 8))),
    ("split", dict(shape=(1, 4, 4, 8), axis=3, sizes=[4, 4])),
    ("split", dict(shape=(2, 6, 3), axis=1, sizes=[2, 2, 2])),
    ("split_v", dict(shape=(1, 5, 4, 6), axis=1, sizes=[1, 4], size_splits=[1, -1])),
    ("split_v", dict(shape=(1, 4, 4, 9), axis=3, sizes=[2, 3, 4])),
    ("pack", dict(shape=(2, 3, 4), axis=0, inputs=3)),
    ("pack", dict(shape=(1, 3, 4), axis=3, inputs=2)),
    ("unpack", dict(shape=(1, 3, 4, 5), axis=1, sizes=[1, 1, 1])),
    ("squeeze", dict(shape=(1, 1, 4, 6))),
    ("gather", dict(shape=(1, 4, 5, 8), axis=3, indices=[7, 0, 3, 3, 5])),
    ("gather", dict(shape=(1, 4, 5, 8), axis=1, indices=[[3, 1], [0, 0]])),
    ("depth_to_space", dict(shape=(1, 3, 4, 8), block=2)),
    ("resize_nearest", dict(shape=(1, 3, 5, 4), size=(6, 10))),
    ("resize_nearest", dict(shape=(1, 5, 4, 4), size=(7, 3), align_corners=True)),
    ("resize_nearest", dict(shape=(1, 5, 4, 4), size=(8, 9), half_pixel=True)),
    ("concat", dict(shape=(1, 3, 4, 5), axis=1, inputs=3, same_params=True)),
    ("concat", dict(shape=(2, 3, 4), axis=2, inputs=2, same_params=True)),
]


def _model(op: str, seed: int, dtype: str, kw: dict) -> bytes:
    return tflite_zoo.op_model(op, seed, dtype=dtype, **kw)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("case", range(len(MOVES)))
def test_data_movement_matches_litert(case, dtype):
    op, kw = MOVES[case]
    blob = _model(op, case, dtype, kw)
    rng = np.random.default_rng(case)
    sess = vkinfer.InferenceSession(blob, device="reference")
    feed = {t.name: _random(t.shape, np.dtype(dtype), rng) for t in sess.get_inputs()}
    _compare(blob, feed, f"{op} {kw}", sess)


UNARY = ["tanh", "hard_swish", "leaky_relu"]


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("op", UNARY)
def test_unary_tables_match_litert_on_every_byte(op, dtype):
    """Every input byte, 6 seeded parameter sets per op and type (HARD_SWISH: TFLite's 16-bit fixed point;
    LEAKY_RELU: XNNPACK's 8-bit-fraction multipliers, and TFLite's builtin kernel for a slope outside XNNPACK's
    range; TANH: float, round to nearest)."""
    every = np.arange(256, dtype=np.uint8).view(dtype).reshape(1, 4, 4, 16)
    for seed in range(6):
        kw = {"alpha": 0.001} if op == "leaky_relu" and seed == 5 else {}  # builtin: |alpha * ratio| < 2**-8
        blob = _model(op, seed, dtype, dict(shape=(1, 4, 4, 16), **kw))
        _compare(blob, {"x": every}, f"{op} seed {seed}")


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("op", ["sub", "maximum", "minimum"])
def test_binary_tables_match_litert_on_every_pair(op, dtype):
    """x varies along H, x1 along W: the (1, 256, 256, 1) output holds every byte pair."""
    x = np.arange(256, dtype=np.uint8).view(dtype).reshape(1, 256, 1, 1)
    x1 = x.reshape(1, 1, 256, 1)
    for seed, kw in enumerate([{}, {"activation": "relu"}, {"same_params": False}]):
        if op != "sub" and "activation" in kw:
            continue
        blob = _model(op, seed, dtype, dict(shape=(1, 256, 1, 1), y_shape=(1, 1, 256, 1), **kw))
        _compare(blob, {"x": x, "x1": x1}, f"{op} {kw}")


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_prelu_matches_litert(dtype):
    """PRELU with a constant per-channel slope: every input byte against 16 seeded slopes."""
    x = np.arange(256, dtype=np.uint8).view(dtype).reshape(1, 16, 16, 1).repeat(16, axis=3)
    for seed in range(3):
        blob = _model("prelu", seed, dtype, dict(shape=(1, 16, 16, 16), y_shape=(1, 1, 16)))
        _compare(blob, {"x": x}, f"prelu seed {seed}")


def test_tables_and_moves_run_on_the_devices():
    """The lowered nodes (Slice, Gather, Table, Table2) are placed on the device, not the host."""
    for op, kw in [("strided_slice", MOVES[0][1]), ("gather", MOVES[11][1]), ("hard_swish", {}),
                   ("sub", dict(shape=(1, 4, 4, 8)))]:
        blob = _model(op, 0, "int8", kw)
        for device in ("cpu", "vulkan"):
            placement = vkinfer.InferenceSession(blob, device=device).placement
            assert "host" not in set(placement.values()), (op, device, placement)


def test_bad_op_parameters_raise_value_errors():
    from vkinfer.model.onnx_import import UnsupportedModelError

    cases = [("gather", dict(shape=(1, 4, 5, 8), axis=3, indices=[8]), "outside [0, 8)"),
             ("strided_slice", dict(shape=(1, 6, 5, 8), begin=[0, 0, 0, 0], end=[1, 6, 5, 8], strides=[1, 0, 1, 1],
                                    out_shape=(1, 6, 5, 8)), "contain 0"),
             ("strided_slice", dict(shape=(1, 6, 5, 8), out_shape=(1, 6, 5, 7)), "has shape [1, 6, 5, 7]"),
             ("split_v", dict(shape=(1, 5, 4, 6), axis=1, sizes=[1, 4], size_splits=[2, 4]), "do not split 5")]
    for op, kw, message in cases:
        refused = outcome_devices(tflite_zoo.op_model(op, 0, **kw))  # one error class on every device
        assert isinstance(refused, ValueError), (op, refused)
        assert message in str(refused) and not isinstance(refused, UnsupportedModelError), (op, str(refused))
