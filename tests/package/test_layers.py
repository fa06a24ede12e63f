"""vkinfer's layers import only downward, and no two of its subpackages import each other (issue 24).

The order, top to bottom (docs/architecture.md):
  tools      benchmark, cli, demo, optable, the test model builders (vkinfer.testing)
  session    vkinfer.session, vkinfer.ort (ONNX Runtime's API), vkinfer.tflite (LiteRT's), vkinfer.ops (single ops
             on a chosen device), the package root
  compile    the plan (nodes into segments, runners), and what compiles plans to measure or predict them:
             calibration (ensure_profile), simulate
  backends   vkinfer.cpu, vkinfer.vulkan, vkinfer.dispatch (the cost models `auto` plans with)
  ir, ops    vkinfer.model (the graph, importers, op table and interpreter, the lowering interface, passes,
             move analysis, the arena algorithm), vkinfer.reference (each op's definition and numpy reference),
             vkinfer.layout (the tensor forms), errors, the
             native modules' wrappers (_vk, _glsl, _cache), what Vulkan drivers are trusted with (_trust)
Every import of a vkinfer module by a vkinfer module is read from the source (ast), function-level imports
included: an import from a higher layer fails, as does any cycle between subpackages. KNOWN lists the imports
still in the way, each with why; it may only shrink (a listed import that is gone fails too, so the list stays
true).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "vkinfer"

# (module prefix, layer); the longest matching prefix wins. 0 is the bottom.
LAYERS = [
    ("vkinfer.errors", 0), ("vkinfer._cache", 0), ("vkinfer.layout", 0), ("vkinfer.reference", 0),
    ("vkinfer.model", 0), ("vkinfer._glsl", 0), ("vkinfer._vk", 0), ("vkinfer._trust", 0), ("vkinfer._native", 0),
    ("vkinfer._planrun", 0),
    ("vkinfer._version", 0), ("vkinfer._pipeline_cache", 0), ("vkinfer._vkcore", 0), ("vkinfer._spirv", 0),
    ("vkinfer.cpu", 1), ("vkinfer.vulkan", 1), ("vkinfer.dispatch", 1),
    ("vkinfer.compiler", 2), ("vkinfer.dispatch.calibrate", 2),
    ("vkinfer.dispatch.calibration", 2), ("vkinfer.dispatch.simulate", 2),
    ("vkinfer", 3), ("vkinfer.ops", 3), ("vkinfer.session", 3), ("vkinfer.ort", 3),
    ("vkinfer.tflite", 3), ("vkinfer.layer_times", 3),
    ("vkinfer.benchmark", 4), ("vkinfer.cli", 4), ("vkinfer.demo", 4), ("vkinfer.optable", 4), ("vkinfer.testing", 4),
]
NAMES = {0: "ir and ops", 1: "backends", 2: "compile", 3: "session", 4: "tools"}

# (importer, imported): still upward, with the step of issue 24 that removes each.
KNOWN: set[tuple[str, str]] = set()


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str) -> bool:
    p = ROOT.parent.joinpath(*name.split("."))
    return (p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()
            or any(p.parent.glob(p.name + ".*.so")) or name.endswith(("._planrun", "._vkcore")))


def imports() -> set[tuple[str, str]]:
    """(importer, imported module) for every vkinfer -> vkinfer import; `from pkg import name` counts as
    importing pkg.name when that is a module."""
    out = set()
    for path in ROOT.rglob("*.py"):
        mod = _module(path)
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not (target == "vkinfer" or target.startswith("vkinfer.")):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    out.add((mod, sub if _exists(sub) else target))
            elif isinstance(node, ast.Import):
                out |= {(mod, a.name) for a in node.names if a.name.split(".")[0] == "vkinfer"}
    return {(a, b) for a, b in out if a != b}


def layer(mod: str) -> int:
    best = max((p for p, _ in LAYERS if mod == p or mod.startswith(p + ".")), key=len)
    return dict(LAYERS)[best]


def subpackage(mod: str) -> str:
    """The unit a module belongs to: the longest LAYERS prefix it matches (a subpackage, a top-level module, or a
    module of another layer inside a subpackage, such as vkinfer.compiler.plan while it still lives there)."""
    return max((p for p, _ in LAYERS if mod == p or mod.startswith(p + ".")), key=len)


EDGES = imports()


def test_the_reader_finds_the_imports_it_must():
    """Not a test of nothing: imports known to exist are seen (relative, function-level, from-package forms)."""
    assert ("vkinfer.cpu.segment", "vkinfer.layout") in EDGES
    assert ("vkinfer.session", "vkinfer.dispatch") in EDGES
    assert ("vkinfer.model.lowering", "vkinfer.reference.qlinear_conv") in EDGES  # inside a function
    assert len(EDGES) > 300


def test_every_module_has_a_layer():
    mods = {a for a, _ in EDGES} | {b for _, b in EDGES}
    assert all(layer(m) in NAMES for m in mods)


def test_no_upward_import():
    up = sorted((a, b, NAMES[layer(a)], NAMES[layer(b)]) for a, b in EDGES if layer(b) > layer(a))
    new = [u for u in up if u[:2] not in KNOWN]
    assert not new, "imports from a higher layer:\n" + "\n".join(f"  {a} ({la}) -> {b} ({lb})" for a, b, la, lb in new)
    gone = KNOWN - {u[:2] for u in up}
    assert not gone, f"no longer imported: drop from KNOWN: {sorted(gone)}"


def test_no_cycle_between_subpackages():
    """Subpackages (and top-level modules) form a DAG, the KNOWN upward imports aside."""
    graph: dict[str, set[str]] = {}
    for a, b in EDGES:
        if (a, b) in KNOWN:
            continue
        sa, sb = subpackage(a), subpackage(b)
        if sa != sb and sa != "vkinfer" and sb != "vkinfer":
            graph.setdefault(sa, set()).add(sb)
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        state[n] = 2
        path.pop()
        return None

    for n in sorted(graph):
        if n not in state and (cycle := visit(n)):
            raise AssertionError("import cycle: " + " -> ".join(cycle))


# ---- the package's shape: no kitchen sinks ----

PY_LIMIT, NATIVE_LIMIT = 600, 800
# Python modules still over the limit, with why; the list may only shrink.
OVERSIZE: dict[str, str] = {}


def test_no_python_module_over_600_lines():
    big = {str(p.relative_to(ROOT.parent)): n for p in ROOT.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > PY_LIMIT}
    assert set(big) <= set(OVERSIZE), {k: v for k, v in big.items() if k not in OVERSIZE}
    assert set(OVERSIZE) <= set(big), f"no longer over {PY_LIMIT} lines: drop from OVERSIZE: {set(OVERSIZE) - set(big)}"


def test_a_long_native_file_says_why_in_its_header():
    """A C/C++ file over 800 lines explains in its first 20 lines why it is one file."""
    srcs = [*ROOT.parent.joinpath("cpu_fallback").rglob("*.[ch]"),
            *(p for ext in ("c", "h", "cpp", "hpp") for p in ROOT.joinpath("_native").glob(f"*.{ext}"))]
    assert srcs
    for p in srcs:
        text = p.read_text().splitlines()
        if len(text) > NATIVE_LIMIT:
            head = "\n".join(text[:20]).lower()
            assert "why one file" in head, f"{p}: {len(text)} lines and no 'Why one file' in its header"

