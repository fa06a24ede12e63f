"""The fuzzers' seeds and mutators: every seed model runs on the reference, cpu and vulkan devices with the same
bits (a seed that did not would make every mutant of it a finding); the protobuf reader round-trips every ONNX
seed byte for byte; the flatbuffer reader finds the TFLite fields the attack mutated; the edits change the
model (they are not no-ops) and never fail on their own, however often they are stacked."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from vkinfer.testing.fuzz import check, mutate
from vkinfer.testing.fuzz.seeds import onnx_seeds, tflite_seeds
from vkinfer.testing.fuzz.targets import RunTarget, targets


@pytest.mark.parametrize("name", sorted({**onnx_seeds(), **tflite_seeds()}))
def test_every_seed_runs_alike_on_every_device(name):
    blob = {**onnx_seeds(), **tflite_seeds()}[name]
    sessions = check.load(blob)
    assert not any(isinstance(s, BaseException) for s in sessions.values()), sessions
    assert check.check_model(blob) is None


@pytest.mark.parametrize("name", sorted(onnx_seeds()))
def test_protobuf_tree_round_trips(name):
    blob = onnx_seeds()[name]
    tree = mutate.pb_parse(blob)
    assert tree and mutate.pb_dump(tree) == blob
    assert any(f.kids for f in tree)  # the graph is parsed as a message, not left as bytes


def test_varint_edits_keep_the_message_well_formed():
    import onnx

    blob = onnx_seeds()["tiny_conv"]
    rng = random.Random(5)
    for _ in range(50):
        what, new = mutate.mutate_onnx(blob, rng)
        if what.startswith("varint"):
            assert mutate.pb_parse(new) is not None
            try:
                onnx.load_model_from_string(new)
            except Exception as e:  # noqa: BLE001 - a varint edit may break a proto2 enum, never the framing
                assert "Error parsing message" not in str(e), what


def test_flatbuffer_slots_name_the_fields():
    import tflite

    blob = tflite_seeds()["tiny_cnn"]
    slots = {label: (p, fmt) for p, fmt, label in mutate.tflite_slots(blob)}
    sg = tflite.Model.GetRootAsModel(blob, 0).Subgraphs(0)
    t0 = sg.Tensors(0)
    assert [struct.unpack_from("<i", blob, slots[f"tensor0.shape[{j}]"][0])[0] for j in range(t0.ShapeLength())] \
        == list(t0.ShapeAsNumpy())
    op = sg.Operators(1)
    assert struct.unpack_from("<i", blob, slots["op1.inputs[0]"][0])[0] == op.Inputs(0)
    assert struct.unpack_from("<I", blob, slots["op1.opcode_index"][0])[0] == op.OpcodeIndex()
    assert any(label.startswith("tensor") and ".scale[" in label for label in slots)
    assert any(".options[" in label for label in slots)
    assert mutate.tflite_slots(blob[:100]) == [] and mutate.tflite_slots(b"") == []


@pytest.mark.parametrize("kind", ["onnx", "tflite"])
def test_stacked_edits_change_the_model_and_never_fail(kind):
    (t,) = targets(kind)
    seeds = set(t.corpus())
    rng = random.Random(11)
    changed = 0
    for _ in range(300):
        what, blob = t.make(rng)
        changed += blob not in seeds
        for _ in range(3):  # mutants of mutants: the readers must not trust what they read
            what, blob = mutate.mutate_model(blob, rng, list(seeds))
    assert changed >= 270


def test_run_decisions_cover_every_feed_mode():
    t = RunTarget()
    whats = set()
    for m in range(16):
        name, feed, names, what = t.decode(bytes([3, m, 1, 2, 3, 4, 5, 6, 7]))
        whats.add(what.split(", ")[1] if ", " in what else "plain")
    for parts in (["as "], ["shape"], ["missing", "unknown input"], ["output_names"], ["laid out"], ["feed as a"]):
        assert any(part in w for w in whats for part in parts), (parts, whats)
    a, b = t.decode(b""), t.decode(b"\x00")  # missing decisions read as zeros
    assert a[0] == b[0] and a[2:] == b[2:] and all(np.array_equal(a[1][k], b[1][k]) for k in a[1])
