"""The import's fast paths (issue 26 item 3: passes.check_graph's memos of attribute lists and convolution geometry,
its set tests of inputs and outputs) keep every error the full checks give: a later node is checked in full even
where an earlier one like it passed."""

from __future__ import annotations

import numpy as np
import pytest

from vkinfer.model.graph import Graph, Node, TensorInfo
from vkinfer.model.passes import check_graph


def _graph(nodes: list[Node], consts: dict | None = None) -> Graph:
    return Graph(nodes, [TensorInfo("x", (1, 4, 3, 5), np.dtype(np.uint8))], [TensorInfo(nodes[-1].outputs[0], None,
                                                                                          np.dtype(np.uint8))],
                 dict(consts or {}))


def test_a_node_writing_one_tensor_twice_is_refused():
    with pytest.raises(ValueError, match="'t' .* writes tensor 'y'"):
        check_graph(_graph([Node("Transpose", "t", ["x"], ["y", "y"], {"perm": [0, 1, 2, 3]})]))


def test_an_out_of_range_list_after_an_equal_length_good_one_is_refused():
    nodes = [Node("Transpose", "t0", ["x"], ["y0"], {"perm": [0, 2, 3, 1]}),
             Node("Transpose", "t1", ["y0"], ["y1"], {"perm": [0, 2, 3, 1]}),  # the memo's hit
             Node("Transpose", "t2", ["y1"], ["y2"], {"perm": [0, 2, 3, 2 ** 40]})]
    with pytest.raises(ValueError, match=r"'t2' \(Transpose\): attribute 'perm' .* does not fit a 32-bit integer"):
        check_graph(_graph(nodes))
    check_graph(_graph(nodes[:2]))


def test_geometry_is_checked_again_for_other_weights():
    params = {"s": np.float32(0.1), "z": np.uint8(128), "zw": np.int8(0), "w1": np.zeros((4, 4, 1, 1), np.int8),
              "w3": np.zeros((4, 4, 3, 3), np.int8)}
    conv = [Node("QLinearConv", f"c{k}", [x, "s", "z", w, "s", "zw", "s", "z"], [f"y{k}"], {"kernel_shape": [1, 1]})
            for k, (x, w) in enumerate([("x", "w1"), ("y0", "w1"), ("y1", "w3")])]
    check_graph(_graph(conv[:2], params))
    with pytest.raises(ValueError, match=r"'c2' \(QLinearConv\): attribute 'kernel_shape' = \[1, 1\]: contradicts"):
        check_graph(_graph(conv, params))
    bad_group = Node("QLinearConv", "c3", ["y1", "s", "z", "w1", "s", "zw", "s", "z"], ["y3"],
                     {"kernel_shape": [1, 1], "group": 3})
    with pytest.raises(ValueError, match=r"'c3' .* 'group' = 3: does not divide"):
        check_graph(_graph([*conv[:2], bad_group], params))
