"""vkinfer itself as an engine: ``vkinfer.InferenceSession(model, device=D, threads=T)``, and vkinfer's analysis of
the model (MACs, peak activation memory) for every row of the model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..load import Model


def _vkinfer_factory(model: Model, device: str, threads: int) -> Callable[[], tuple[Callable, Any]]:
    from ...session import InferenceSession

    def make():
        s = InferenceSession(model.data, device=device, threads=threads)
        feed = model.feed
        return (lambda: s.run(None, feed)), s

    return make


def analysis(sess, feed: dict[str, np.ndarray]) -> tuple[int | None, int | None]:
    """(MACs of one inference, peak bytes of live activations) of a vkinfer session's graph, as `vkinfer info`
    counts them: convolutions and matrix products; tensors alive from their producer to their last reader."""
    from ...compiler.plan import trace
    from ...model.stats import macs_and_peak

    g = sess.graph
    plan = sess.plan(feed)
    info = plan.info if plan is not None else trace(g, feed)

    return macs_and_peak(g, info)
