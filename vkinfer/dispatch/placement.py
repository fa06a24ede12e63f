"""Placement: which device each node runs on, minimising predicted latency (Stone's s-t minimum cut).

**Prediction** (`predict`) follows the execution core exactly: segments are maximal runs of consecutive
nodes on one device; each pays its device's `segment_ns` (one native call; one submit and wait), its nodes'
times, one upload per tensor it reads from elsewhere and one download per tensor it hands on (the model's
inputs come from, and its outputs go to, the host).

**Two devices** (the CPU, side S, against one GPU, side T) are solved exactly as a minimum cut over:
- node terms: s->v costs v's time on the GPU (cut when v is on the GPU), v->t its time on the CPU; a device
  that cannot run v makes that edge infinite;
- segment starts: nodes run in order, so a GPU segment starts at v when v is on the GPU and the node before
  it is not: edge prev->v with the GPU's submit cost (and v->prev with the CPU's call cost); after a host node
  or at the start, unary edges. This term is exact because segments are runs in node order;
- transfers: for a tensor made by u, one auxiliary node per direction makes "any reader on the other device"
  pay download + upload once, however many readers there are; tensors also read by the host, or model
  outputs, pay u's download wherever u is; the model's inputs and host-made tensors pay one upload to each
  device that reads them.
The cut's value is `cut_cost(placement)` for the placement it gives (tests check both against brute force).
The one cost it cannot express is a tensor read by a later segment on the *same* device across a segment of
the other (downloaded and uploaded again); `predict` counts it, and a refinement pass then flips whole
segments to the other device while the prediction improves, and the single-device placements are kept when
they predict better. So the result is never predicted worse than the best single device. A split is kept
only when predicted at least `split_margin` faster than the best single device (the Dispatcher uses 5%):
on lavapipe pinned to one core, a split of MobileNetV2 predicted 0.3% faster ran 23% slower, its one
offloaded node paying lavapipe's thread wake-ups that a 3-term model of isolated nodes cannot see; gains
within the model's own error (5-20% per class) are not worth a second device's variance.

**More devices** (the CPU and several GPUs): the two-device cut against each GPU in turn, keeping the best
prediction. Transfers between two GPUs go through host arrays anyway, so a split across GPUs rarely pays.

Capacities are integers for scipy's maximum_flow (push-relabel in C: 0.3 ms for a 500-node graph against
about 30 ms for networkx's pure-Python one); the unit is chosen so that the finite sum fits in 2^28.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from ..model.graph import Graph
from .costs import Work
from .profile import DeviceProfile

HOST = "host"
OBJECTIVES = ("median", "p90")
INF = float("inf")


@dataclasses.dataclass
class Problem:
    """What the planner needs: the traced graph, each node's Work, the candidate devices (the CPU first), their
    profile entries (and the host's), which devices can run each node, and nodes fixed by hand."""

    g: Graph
    info: dict
    works: dict[str, Work]
    devices: list[str]
    entries: dict[str, DeviceProfile]
    can: dict[str, set[str]]
    fixed: dict[str, str] = dataclasses.field(default_factory=dict)
    objective: str = "median"
    aliases: set[tuple[str, str]] = dataclasses.field(default_factory=set)  # (node, device): bytes stay put
    # A placement that splits the graph across devices is kept only when predicted at least this fraction
    # faster than the best single device (the Dispatcher's default: SPLIT_MARGIN).
    split_margin: float = 0.0

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(map(repr, OBJECTIVES))}, got {self.objective!r}")
        self.order = [n.name for n in self.g.nodes]
        self._allowed: dict[str, set[str]] = {}
        self._scale = {d: (e.tail if self.objective == "p90" else 1.0) for d, e in self.entries.items()}
        # Node costs per device (INF where the device cannot run the node).
        self.cost: dict[str, dict[str, float]] = {}
        for n in self.g.nodes:
            allowed = self.allowed(n.name)
            self.cost[n.name] = {d: (0.0 if (n.name, d) in self.aliases else
                                     self.entries[d].node_ns(self.works[n.name]) * self._scale[d]) if d in allowed
                                 else INF for d in (*self.devices, HOST) if d in self.entries}
        # Activation tensors: producer node (None: a model input) and reader nodes, in order.
        consts = self.g.consts
        self.producer: dict[str, str | None] = {t.name: None for t in self.g.inputs}
        self.readers: dict[str, list[str]] = {}
        for n in self.g.nodes:
            for t in dict.fromkeys(i for i in n.inputs if i and i not in consts):
                self.readers.setdefault(t, []).append(n.name)
            for o in n.outputs:
                if o:
                    self.producer[o] = n.name
        self.graph_outputs = {t.name for t in self.g.outputs}
        self._moves: dict[tuple[str, str, str], float] = {}

    def allowed(self, node: str) -> set[str]:
        """Devices node may go to: the hand-given one, else those that can run it among the candidates; {host}
        when none can."""
        ok = self._allowed.get(node)
        if ok is None:
            if node in self.fixed:
                ok = {self.fixed[node]}
            else:
                ok = {d for d in self.can.get(node, ()) if d in self.devices} or {HOST}
            self._allowed[node] = ok
        return ok

    def nbytes(self, t: str) -> int:
        shape, dt = self.info[t]
        return math.prod(shape) * np.dtype(dt).itemsize

    def _move(self, way: str, d: str, t: str) -> float:
        key = (way, d, t)
        ns = self._moves.get(key)
        if ns is None:
            ns = self._moves[key] = 0.0 if d == HOST else \
                self.entries[d].link(way, self.info[t][1]).ns(self.nbytes(t)) * self._scale[d]
        return ns

    def up(self, d: str, t: str) -> float:
        """Time to bring tensor t from a host array into device d's form."""
        return self._move("upload", d, t)

    def down(self, d: str, t: str) -> float:
        """Time to hand tensor t from device d back as a host array."""
        return self._move("download", d, t)

    def seg(self, d: str) -> float:
        return 0.0 if d == HOST else self.entries[d].segment_ns * self._scale[d]


def edge_transposes(g: Graph, info: dict, move_of, plain=frozenset()) -> set[str]:
    """The Transposes a CPU segment folds into other operators (vkinfer/cpu/segment.py, the same tests): a move
    (`move_of(node)`: the CPU layer's `move`, (source form shape, perm), or None) that is the only reader of an
    8-bit model input, or makes an 8-bit model output from a tensor only it reads, the move's source in the
    tensor's form: the edge conversion (an upload or download, costed as such) moves the bytes in the transposed
    order; or the only reader of a quantize's output (`plain`: the nodes whose CPU layer can write the host's
    element order) whose result is the quantized values in the host's order: the quantize writes them so. The
    node then costs nothing on the CPU (a TFLite model's NHWC input: 2.5 us of MobileNetV1 0.25 VWW's 96x96x3
    input predicted as a move on top of its upload). The output and quantize sides assume the producer shares
    the Transpose's segment."""
    from ..layout import form_perm, form_shape, is_8bit

    def in_place(shape, perm) -> bool:  # segment._identity: only size-1 axes move
        moved = [a for a in perm if shape[a] != 1]
        return moved == sorted(moved)

    readers: dict[str, list[str]] = {}
    made = set()
    for n in g.nodes:
        for t in dict.fromkeys(i for i in n.inputs if i):
            readers.setdefault(t, []).append(n.name)
        made.update(o for o in n.outputs if o)
    ins = {t.name for t in g.inputs}
    outs = {t.name for t in g.outputs}
    producer = {o: n.name for n in g.nodes for o in n.outputs if o}
    folded = set()
    for n in g.nodes:
        if n.op != "Transpose" or not n.inputs or not n.outputs or n.inputs[0] not in info or n.outputs[0] not in info:
            continue
        x, y = n.inputs[0], n.outputs[0]
        if not is_8bit(info[x][1]) or x in outs:
            continue
        move = move_of(n.name)
        if move is None or tuple(move[0]) != tuple(form_shape(info[x][0])):
            continue
        if x in ins and readers.get(x) == [n.name] and y not in outs:
            folded.add(n.name)
        elif y in outs and not readers.get(y) and x in made and x not in ins and readers.get(x) == [n.name]:
            folded.add(n.name)
        elif producer.get(x) in plain and readers.get(x) == [n.name] and y not in outs:
            shape = tuple(info[x][0])
            if in_place(shape, tuple(form_perm(shape)[i] for i in move[1])):
                folded.add(n.name)
    return folded


@dataclasses.dataclass
class Prediction:
    """Predicted time of a placement: total, and its parts (ns)."""

    total_ns: float
    nodes_ns: float
    segments_ns: float
    transfers_ns: float
    segments: list[tuple[str, list[str]]]


def segments_of(order: list[str], placement: dict[str, str]) -> list[tuple[str, list[str]]]:
    runs: list[tuple[str, list[str]]] = []
    for name in order:
        d = placement[name]
        if runs and runs[-1][0] == d:
            runs[-1][1].append(name)
        else:
            runs.append((d, [name]))
    return runs


def predict(p: Problem, placement: dict[str, str]) -> Prediction:
    """Predicted latency of `placement` as the execution core would run it (module docstring)."""
    runs = segments_of(p.order, placement)
    seg_of = {n: i for i, (_, names) in enumerate(runs) for n in names}
    nodes = sum(p.cost[n][placement[n]] for n in p.order)
    segs = sum(p.seg(d) for d, _ in runs)
    moves = 0.0
    for t, readers in p.readers.items():
        u = p.producer.get(t)
        src = seg_of[u] if u is not None else -1
        later = {seg_of[r] for r in readers if seg_of[r] != src}
        for s in later:
            moves += p.up(runs[s][0], t)
        if u is not None and (later or t in p.graph_outputs):
            moves += p.down(placement[u], t)
    for t in p.graph_outputs:
        u = p.producer.get(t)
        if u is not None and t not in p.readers:
            moves += p.down(placement[u], t)
    return Prediction(nodes + segs + moves, nodes, segs, moves, runs)


def cut_cost(p: Problem, placement: dict[str, str], a: str, b: str) -> float:
    """The minimum cut's objective for a placement on devices a (CPU side) and b (module docstring): node times,
    segment starts, and transfers between devices (not between two segments of one device)."""
    total = 0.0
    prev = None
    for name in p.order:
        d = placement[name]
        total += p.cost[name][d]
        if d != HOST and d != prev:
            total += p.seg(d)
        prev = d
    for t, readers in p.readers.items():
        u = p.producer.get(t)
        on = {placement[r] for r in readers} - {HOST}
        if u is None or placement[u] == HOST:
            total += sum(p.up(d, t) for d in on)
            continue
        du = placement[u]
        external = t in p.graph_outputs or any(placement[r] == HOST for r in readers)
        others = on - {du}
        if external or others:
            total += p.down(du, t)
        total += sum(p.up(d, t) for d in others)
    for t in p.graph_outputs:
        u = p.producer.get(t)
        if u is not None and t not in p.readers and placement[u] != HOST:
            total += p.down(placement[u], t)
    return total


def min_cut(p: Problem, a: str, b: str) -> dict[str, str]:
    """The placement on {a, b} (nodes neither can run keep their device: the host, or a hand-given third one)
    minimising `cut_cost`, by an s-t minimum cut (module docstring)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    place: dict[str, str] = {}
    var: dict[str, int] = {}
    for name in p.order:
        if p.allowed(name) & {a, b}:
            var[name] = len(var) + 2
        else:
            place[name] = next(iter(p.allowed(name)))
    if not var:
        return place
    src, snk = 0, 1
    edges: list[tuple[int, int, float]] = []
    count = [len(var) + 2]

    def aux() -> int:
        count[0] += 1
        return count[0] - 1

    prev = None
    for name in p.order:
        v = var.get(name)
        if v is not None:
            ok = p.allowed(name)
            edges.append((src, v, p.cost[name][b] if b in ok else INF))
            edges.append((v, snk, p.cost[name][a] if a in ok else INF))
            pv = var.get(prev) if prev is not None else None
            if pv is not None:  # a segment starts here when the device changes
                edges.append((pv, v, p.seg(b)))
                edges.append((v, pv, p.seg(a)))
            else:  # the first node, or after one outside the cut: a segment starts here whatever the device
                edges.append((src, v, p.seg(b)))
                edges.append((v, snk, p.seg(a)))
        prev = name
    for t in (*p.readers, *(o for o in p.graph_outputs if o not in p.readers)):
        readers = p.readers.get(t, [])
        u = p.producer.get(t)
        rv = [var[r] for r in readers if r in var]
        if u is None or u not in var:  # made outside: each device that reads it pays its upload once
            if rv:
                c = aux()
                edges.append((src, c, p.up(b, t)))
                edges.extend((c, r, INF) for r in rv)
                c = aux()
                edges.append((c, snk, p.up(a, t)))
                edges.extend((r, c, INF) for r in rv)
            continue
        v = var[u]
        external = t in p.graph_outputs or len(rv) < len(readers)
        if external:  # downloaded wherever u runs
            edges.append((v, snk, p.down(a, t)))
            edges.append((src, v, p.down(b, t)))
        if rv:  # any reader on the other device: download (unless paid above) and one upload
            c = aux()
            edges.append((v, c, p.up(b, t) + (0.0 if external else p.down(a, t))))
            edges.extend((c, r, INF) for r in rv)
            c = aux()
            edges.append((c, v, p.up(a, t) + (0.0 if external else p.down(b, t))))
            edges.extend((r, c, INF) for r in rv)
    n = count[0]
    arr = np.array(edges, dtype=np.float64)
    c = arr[:, 2]
    inf = np.isinf(c)
    unit = max(1.0, float(c[~inf].sum()) / 2.0**28)
    big = 2**30
    caps = np.where(inf, big, np.minimum(np.round(c / unit), big - 1)).astype(np.int64)
    rows, cols = arr[:, 0].astype(np.int32), arr[:, 1].astype(np.int32)
    cap = coo_matrix((caps, (rows, cols)), shape=(n, n)).tocsr()
    cap.sum_duplicates()
    cap.data = np.minimum(cap.data, 2**31 - 1).astype(np.int32)
    flow = maximum_flow(cap, src, snk).flow
    resid = (cap - flow).tocsr()
    resid.data[resid.data < 0] = 0
    resid.eliminate_zeros()
    reach = set(breadth_first_order(resid, src, directed=True, return_predecessors=False).tolist())
    for name, v in var.items():
        place[name] = a if v in reach else b
    return place


def refine(p: Problem, placement: dict[str, str]) -> dict[str, str]:
    """Flip whole segments to another candidate device while the prediction improves (what the cut cannot see:
    same-device tensors across segments)."""
    best, best_ns = dict(placement), predict(p, placement).total_ns
    for _ in range(32):
        runs = segments_of(p.order, best)
        if len(runs) > 64:
            break
        improved = None
        for d, names in runs:
            if d == HOST:
                continue
            for other in p.devices:
                if other == d or not all(other in p.allowed(n) for n in names):
                    continue
                trial = dict(best)
                trial.update({n: other for n in names})
                ns = predict(p, trial).total_ns
                if ns < best_ns * (1 - 1e-9) and (improved is None or ns < improved[1]):
                    improved = (trial, ns)
        if improved is None:
            break
        best, best_ns = improved
    return best


def single(p: Problem, d: str) -> dict[str, str]:
    """Every node on `d` where it can run, else the CPU where it can, else the host (the execution core's rule
    for device=d)."""
    out = {}
    for name in p.order:
        ok = p.allowed(name)
        out[name] = d if d in ok else p.devices[0] if p.devices[0] in ok else next(iter(ok))
    return out


def solve(p: Problem) -> tuple[dict[str, str], Prediction, dict[str, float]]:
    """The placement of least predicted latency found (module docstring), its prediction, and each single
    device's predicted total. When the whole model on the CPU takes less than one submit on every other device,
    no placement using them can be faster (each would pay at least that submit): the cut is skipped."""
    cpu = p.devices[0]
    options = {d: single(p, d) for d in p.devices}
    preds = {d: predict(p, pl) for d, pl in options.items()}
    singles = {d: pr.total_ns for d, pr in preds.items()}
    best_pl, best = options[cpu], preds[cpu]
    for d in p.devices[1:]:
        if preds[d].total_ns < best.total_ns:
            best_pl, best = options[d], preds[d]
    bar = best.total_ns * (1 - p.split_margin)
    for gpu in p.devices[1:]:
        if singles[cpu] <= p.seg(gpu):
            continue
        cut = min_cut(p, cpu, gpu)
        if len({cut[n] for n in p.order} - {HOST}) > 1:  # mixed: the refinement may merge segments
            cut = refine(p, cut)
        pr = predict(p, cut)
        mixed = len({cut[n] for n in p.order} - {HOST}) > 1
        if pr.total_ns < (bar if mixed else best.total_ns) and pr.total_ns < best.total_ns:
            best_pl, best = cut, pr
    return best_pl, best, singles


def brute_force(p: Problem, a: str, b: str, objective=cut_cost) -> tuple[dict[str, str], float]:
    """The best placement on {a, b} by enumeration (tests and bench: up to about 16 placeable nodes)."""
    free = [n for n in p.order if {a, b} <= p.allowed(n)]
    base = {n: (next(iter(p.allowed(n) & {a, b})) if p.allowed(n) & {a, b} else next(iter(p.allowed(n))))
            for n in p.order if n not in free}
    best, best_ns = None, INF
    for bits in itertools.product((a, b), repeat=len(free)):
        pl = {**base, **dict(zip(free, bits, strict=True))}
        ns = objective(p, pl, a, b) if objective is cut_cost else objective(p, pl).total_ns
        if ns < best_ns:
            best, best_ns = pl, ns
    return best, best_ns
