"""Real int8 TFLite models from a public PyPI wheel (vkinfer.testing.real_tflite: pymicro-wakeword 2.5.0's streaming
micro_wakeword keyword spotters): every device streams LiteRT's bits frame by frame, state carried, and the whole
model runs in one native call with no host node.

The models come from the cache (build/real-models or $VKINFER_REAL_MODELS; `python bench/real_tflite.py --fetch`
fills it, the network used only then). With no cache these tests skip, saying what to run.
"""

import numpy as np
import pytest
from support.agree import sessions

from vkinfer.testing import real_tflite as rt

FRAMES = 45


def _needs(name: str):
    """A collection-time skip mark naming what to run when the cache lacks the model."""
    why = rt.missing_reason(name)
    return pytest.mark.skipif(why is not None, reason=why or "")


def _path(name: str):
    return rt.model_path(name)


@pytest.mark.parametrize("form", ["shipped", "logit"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=_needs(n)) for n in rt.MODELS])
def test_streams_litert_bits_natively(name, form):
    """FRAMES frames through LiteRT and through every device from a fresh state, a restart two thirds in (LiteRT:
    a new interpreter; vkinfer: reset_state), each output byte-equal; then placement: no host node, one native
    call per run on the cpu device. Twice: the model as shipped (its probability output mostly sits at 0 on
    such frames), and with its int8 logit as the output (rt.logit_model), which moves with every frame."""
    from ai_edge_litert.interpreter import Interpreter

    path = _path(name)
    blob = path.read_bytes() if form == "shipped" else rt.logit_model(name)
    sess = sessions(blob)
    iname = sess["cpu"].get_inputs()[0].name
    xs = rt.frames(name, FRAMES, seed=3)

    def interpreter():
        it = Interpreter(model_content=blob, num_threads=1)
        it.allocate_tensors()
        return it
    it = interpreter()
    i_in, i_out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    seen = set()
    for k, x in enumerate(xs):
        if k == 2 * FRAMES // 3:
            it = interpreter()
            for s in sess.values():
                s.reset_state()
        it.set_tensor(i_in, x)
        it.invoke()
        want = it.get_tensor(i_out)
        seen.add(want.tobytes())
        for device, s in sess.items():
            got = s.run(None, {iname: x})[0]
            assert got.dtype == want.dtype and got.shape == want.shape, (device, k)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} ({form}) on {device}, frame {k}")
    if form == "logit":
        assert len(seen) >= 10, f"the logit took {len(seen)} values: the frames must move it"
    cpu = sess["cpu"]
    assert not [n for n, d in cpu.placement.items() if d.startswith("host")]
    plan = cpu._fast.plan if cpu._fast is not None else cpu._latest
    assert plan is not None and plan.native_calls == 1


def test_table_and_paths(tmp_path, monkeypatch):
    assert len(rt.MODELS) == 4 and {m.wheel for m in rt.MODELS.values()} <= set(rt.WHEELS)
    assert all(len(m.sha256) == 64 for m in rt.MODELS.values())
    assert rt.model_path("mww_alexa", "/c").as_posix() == "/c/extracted/pymicro_wakeword/models/alexa.tflite"
    with pytest.raises(ValueError, match="no real TFLite model 'kws'"):
        rt.model_path("kws")
    a, b = rt.frames("mww_okay_nabu", 5, seed=1), rt.frames("mww_okay_nabu", 5, seed=1)
    assert a.shape == (5, 1, 3, 40) and a.dtype == np.int8
    np.testing.assert_array_equal(a, b)
    monkeypatch.setenv("VKINFER_REAL_MODELS", str(tmp_path))
    assert rt.cached() == []
    why = rt.missing_reason("mww_alexa")
    assert "bench/real_tflite.py --fetch" in why and "pymicro-wakeword==2.5.0" in why
