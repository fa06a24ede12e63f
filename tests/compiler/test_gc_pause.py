"""The cyclic garbage collector is off for the whole of a session's construction (its full passes over a large
graph's objects grew faster than the graph: vkinfer/model/graph.py gc_paused), back on afterwards only where it
was on before, also when construction fails and when pauses nest or overlap across threads."""

from __future__ import annotations

import gc
import threading

import pytest
from support.load_chains import chain_model

import vkinfer
from vkinfer import session as session_mod
from vkinfer.model import graph as graph_mod
from vkinfer.model.graph import gc_paused


def test_session_construction_runs_without_the_collector(monkeypatch):
    seen = []
    real = session_mod.InferenceSession._check_placement

    def spy(self, placement):
        seen.append(gc.isenabled())
        return real(self, placement)

    monkeypatch.setattr(session_mod.InferenceSession, "_check_placement", spy)
    assert gc.isenabled()
    vkinfer.InferenceSession(chain_model("qlinear_add", 8), device="cpu")
    assert seen == [False] and gc.isenabled()
    with pytest.raises(ValueError):
        vkinfer.InferenceSession(b"not a model", device="cpu")
    assert gc.isenabled()
    gc.disable()
    try:
        vkinfer.InferenceSession(chain_model("qlinear_add", 8), device="cpu")
        assert not gc.isenabled()  # left off where it was off
    finally:
        gc.enable()


def test_nested_and_overlapping_pauses_count():
    inside, release = threading.Event(), threading.Event()

    def other():
        with gc_paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
        t.start()
        inside.wait(10)
    assert not gc.isenabled()  # the other thread's pause is still on
    release.set()
    t.join(10)
    assert gc.isenabled() and graph_mod._GC_PAUSE[0] == 0
