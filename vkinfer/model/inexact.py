"""Float ops whose results vkinfer cannot promise bit-equal to ONNX Runtime's: why, and the bound a test pins.

The rule (issue 25, "Bad input"): every op between quantized ones follows ORT 1.31's CPU float32 arithmetic where it
can be reproduced; where it cannot, the op still runs, and `vkinfer info` names each such node with the reason and
the bound its test pins (`inexact_nodes`). A `vkinfer:Table` folded from such an op (vkinfer/model/tables.py) is
listed too: its bytes are the float path's, so a rounding boundary inside the gap can move one code.

Two kinds of entry:
- ORT's own result depends on the machine (the kernel MLAS picks for the CPU, the thread count): vkinfer fixes one
  of ORT's orders, so it is exact against that one and within the bound against the others.
- ORT's arithmetic is not reproduced (Eigen's packet polynomials against numpy's libm, summation orders Eigen
  chooses): within the bound everywhere.
Every entry names the test that pins its bound; tests/numerics/test_inexact.py checks each test exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .graph import Graph, Node


@dataclass(frozen=True)
class Inexact:
    """Why an op's bits can differ from ORT's, the bound pinned, and the test pinning it (path::function)."""

    reason: str
    bound: str
    test: str
    when: Callable[[Node], bool] | None = None  # only nodes of the op for which this holds (None: all)


INEXACT: dict[str, Inexact] = {
    "Atan": Inexact("Eigen's packet atan in ORT (a polynomial vkinfer does not reproduce), numpy's here", "3 ulps",
                    "tests/numerics/test_host_ops_elementwise.py::test_unary_bounded"),
    "Softsign": Inexact("ORT 1.31 multiplies by Eigen's reciprocal estimate; vkinfer divides", "1 ulp",
                        "tests/numerics/test_host_ops_elementwise.py::test_unary_bounded"),
    "LRN": Inexact("Eigen's vectorised pow in ORT, powf here", "2 ulps",
                   "tests/numerics/test_host_ops_norm.py::test_lrn_bounded"),
    "Softmax": Inexact("exact against ORT's AVX-512F kernels (16-lane max and sum); ORT on CPUs with AVX2 only sums "
                       "in 8 lanes", "10 ulps where |y| >= 2^-126, 2^-126 below (measured 9)",
                       "tests/ops/test_float_softmax.py::test_softmax_table"),
    "LogSoftmax": Inexact("exact against ORT's AVX-512F kernels; ORT on CPUs with AVX2 only sums in 8 lanes",
                          "4 ulps of max(|y|, 1) (measured 3.25)",
                          "tests/ops/test_float_softmax.py::test_softmax_table"),
    "LayerNormalization": Inexact(
        "exact against ORT's AVX2 kernel (rows of 8 or more); ORT on CPUs without AVX2 (and ARM) runs a Welford "
        "loop", "16 ulps of the row's max |y| at offset 0, 64 at 10, 4096 at 1000 over a spread of 3 (measured 9, "
        "22, 1825)", "tests/ops/test_layer_normalization.py::test_welford_bound_for_cpus_without_avx2"),
    "MatMul": Inexact("MLAS SGEMM, exact against ORT on one intra-op thread; ORT's K blocks follow each thread's "
                      "slice of N, so its bits change with its thread count; a vector operand takes MLAS's "
                      "dot-product kernel (8 ulps)", "8 ulps of the largest partial sum (measured 4)",
                      "tests/ops/test_float_matmul.py::test_ort_thread_count_changes_its_bits"),
    "Gemm": Inexact("MLAS SGEMM, exact against ORT on one intra-op thread; its bits change with its thread count",
                    "8 ulps of the largest partial sum (measured 4)",
                    "tests/ops/test_float_matmul.py::test_ort_thread_count_changes_its_bits"),
    "Conv": Inexact("float Conv as im2col and MLAS SGEMM, exact against ORT on one intra-op thread; ORT's NCHWc "
                    "kernels (its layout rewrite of float models) sum in another order",
                    "16 ulps of the largest partial sum (8 for dot-product shapes)",
                    "tests/ops/test_float_conv.py::test_nchwc_rewrite_bound"),
    "Resize": Inexact("nearest with half_pixel_symmetric: within a few ulps of a rounding edge ORT sometimes picks "
                      "the neighbouring index, which neither float nor double evaluation of its formula reproduces",
                      "one index at those edges, exact elsewhere",
                      "tests/ops/test_float_resize.py::test_nearest_half_pixel_symmetric_bound",
                      when=lambda n: _attr_str(n, "mode", "nearest") == "nearest"
                      and _attr_str(n, "coordinate_transformation_mode", "half_pixel") == "half_pixel_symmetric"),
}


def _attr_str(node: Node, key: str, default: str) -> str:
    v = node.attrs.get(key, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def why_inexact(node: Node) -> Inexact | None:
    """The entry for a node: its op's, or for a folded table the first inexact op it folded."""
    base = node.op.rpartition(":")[2] if node.op.startswith("ai.onnx:") else node.op
    entry = INEXACT.get(base)
    if entry is not None and (entry.when is None or entry.when(node)):
        return entry
    for op in node.attrs.get("folded_ops") or ():
        if op in INEXACT and INEXACT[op].when is None:
            return INEXACT[op]
    return None


def inexact_nodes(g: Graph) -> list[tuple[Node, Inexact]]:
    """The graph's nodes whose bits can differ from ORT's (module docstring), in graph order."""
    out = []
    for n in g.nodes:
        why = why_inexact(n)
        if why is not None:
            out.append((n, why))
    return out
