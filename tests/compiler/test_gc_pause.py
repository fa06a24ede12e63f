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


class _Cyclic:
    """A node of a reference cycle, counting how many of its kind are alive."""

    alive = 0

    def __init__(self):
        _Cyclic.alive += 1
        self.me = self

    def __del__(self):
        _Cyclic.alive -= 1


def test_what_a_pause_made_goes_to_the_oldest_generation_and_its_cycles_are_still_collected():
    gc.collect()
    assert gc.get_freeze_count() == 0
    with gc_paused():
        made = [[i] for i in range(50_000)]  # tracked containers the pause made
        for _ in range(100):
            _Cyclic()  # cyclic garbage made during the pause
    # Handed to the oldest generation: the youngest holds nothing of it (its next pass would walk all 50k), and
    # nothing is left frozen.
    assert gc.get_count()[0] < 1000 and gc.get_freeze_count() == 0
    assert gc.is_tracked(made[0])
    assert _Cyclic.alive == 100
    gc.collect()  # a full collection finds the cycles
    assert _Cyclic.alive == 0
    del made


def test_objects_the_program_froze_stay_frozen():
    frozen = [[i] for i in range(100)]
    gc.freeze()
    try:
        n = gc.get_freeze_count()
        assert n >= 100
        with gc_paused():
            _ = [[i] for i in range(1000)]
        assert gc.get_freeze_count() == n  # the pause did not unfreeze the program's objects (nor add its own)
    finally:
        gc.unfreeze()
    del frozen
