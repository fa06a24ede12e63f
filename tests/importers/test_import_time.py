"""Importing in linear time, at a small cost per node (issue 26, item 3): the TFLite reader reads the flatbuffer
directly (vkinfer/model/tflite_import/fastread.py) with the values, and on corrupt files the errors, of the
`tflite` classes it replaced; the ONNX import's passes and the memory planner take time proportional to the
graph (compared on chains of n and 4n layers).

Times are this process's CPU time (time.process_time), which other processes on a loaded machine do not inflate."""

from __future__ import annotations

import numpy as np
import pytest
from support.load_chains import chain_model

from importers.test_mutations import _tflite_bases, _tflite_bytes_case, _tflite_struct_case
from vkinfer.model.tflite_import import reader


def _canon(x):
    """`x` (parsed subgraphs, metadata) as comparable plain values (arrays by dtype, shape and bytes)."""
    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, reader.Tensor):
        return ("tensor", x.name, x.shape, x.dtype, x.data, _canon(x.scale), _canon(x.zero_point), x.qdim)
    if isinstance(x, list | tuple):
        return tuple(_canon(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _canon(v)) for k, v in x.items()))
    if isinstance(x, float) and x != x:
        return "nan"
    if type(x).__name__ == "Table":  # an op's options: where they are in the file
        return ("table", x.Pos, len(x.Bytes))
    return x if not isinstance(x, type) else x.__name__


def _read(blob: bytes, fast: bool, monkeypatch) -> tuple:
    """parse_all and file_meta of `blob` (the outcome: values, or the error's type and message); `fast`: False
    reads with the tflite classes alone (the former reader). Also whether the fast reader's fields were used."""
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(reader, "_parse_fast", lambda *a: 1 / 0)
        try:
            subgraphs = reader.parse_all(blob)
        except Exception as e:  # noqa: BLE001 - the outcome compared
            return ("error", type(e).__name__, str(e)), False
        tensors, _, ins, outs = subgraphs[0]
        try:
            meta = reader.file_meta(blob, ins, outs, [f"i{k}" for k in ins], [f"o{k}" for k in outs], [],
                                    tensors if fast else None)
        except Exception as e:  # noqa: BLE001
            meta = ("error", type(e).__name__, str(e))
    used = all(t.raw is not None for s in subgraphs for t in s[0])
    return _canon((subgraphs, meta)), used


def test_tflite_fast_reader_reads_what_the_tflite_classes_read(monkeypatch):
    """The zoo's TFLite models and a chain are read by the fast reader, with the former reader's values; 120
    mutants of them (bytes and fields changed: tests/importers/test_mutations.py) read the same or fail with the
    same error (the fast reader gives up on anything odd, and the classes read the file again)."""
    bases = _tflite_bases()
    for name, blob in [*bases.items(), ("chain", chain_model("tflite_add", 30))]:
        got, used = _read(blob, True, monkeypatch)
        assert used, f"{name}: the fast reader gave up"
        assert got == _read(blob, False, monkeypatch)[0], name
    fast_used = 0
    for seed in range(60):
        for case in (_tflite_bytes_case, _tflite_struct_case):
            what, blob = case(bases, seed)
            got, used = _read(blob, True, monkeypatch)
            assert got == _read(blob, False, monkeypatch)[0], f"{case.__name__}[{seed}] {what}"
            fast_used += used
    assert fast_used >= 40  # most mutants are read the fast way (those that are not exercise the fallback)


@pytest.mark.parametrize("bad", ["negative vtable", "vector past the end"])
def test_tflite_fast_reader_gives_up_on_offsets_outside_the_file(bad):
    """fastread raises (and the slow reader takes over) where an offset leaves the file, where the flatbuffers
    runtime raises too (a negative position) or would read on past its vector."""
    from vkinfer.model.tflite_import import fastread

    blob = bytearray(chain_model("tflite_add", 2))
    root = fastread._U32(blob, 0)[0]
    if bad == "negative vtable":
        blob[root:root + 4] = (root + 8).to_bytes(4, "little", signed=True)  # vtable at root - (root + 8) < 0
        with pytest.raises(fastread._Corrupt):
            fastread.buffers(bytes(blob), root)
    else:
        f = fastread._slots(bytes(blob), len(blob), root, 3)
        sg = fastread._tables(bytes(blob), len(blob), root + f[2])[0]
        tensors_at = sg + fastread._slots(bytes(blob), len(blob), sg, 1)[0]
        vec = tensors_at + fastread._U32(blob, tensors_at)[0]
        blob[vec:vec + 4] = (10 ** 8).to_bytes(4, "little")  # a length past the end of the file
        with pytest.raises(fastread._Corrupt):
            fastread.tensors(bytes(blob), sg)
