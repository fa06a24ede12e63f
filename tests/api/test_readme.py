"""README.md is true and runnable: every fenced code block runs, and the numbers and lists it states are the ones
the code has.

Blocks: ```python runs as a script in a fresh interpreter in an empty temporary directory; ```sh lines run for real
when they are `vkinfer ...` commands (in a temporary directory holding a small zoo model as model.onnx and an input
for it as x.npy; an optional `[--flag value]` is run both left out and given) and are dry-run with `make -n` when
they are `make <target>` (running them would recurse into this suite). Any other block kind or command fails."""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.agree import run_devices

ROOT = Path(__file__).resolve().parents[2]
FRONT = (ROOT / "README.md").read_text()
DOCS = sorted(d for d in (ROOT / "docs").glob("*.md") if d.name != "ops.md")  # ops.md: generated, checked below
# The README and the docs it links to are one text for these tests: a fact moved from one to the other is
# still checked where it now stands.
README = FRONT + "".join("\n" + d.read_text() for d in DOCS)
VKINFER = Path(sys.executable).with_name("vkinfer")  # the console script of this environment
# What `make -n <target>` must show for the README's make lines.
MAKE_RECIPES = {"demo": "-m vkinfer.demo", "test": "-m pytest", "wheel": "scripts/wheel-build.sh"}


def _blocks(text: str) -> list[tuple[int, str, str]]:
    """(line number, info string, body) of every fenced block."""
    blocks, open_at, lang, body = [], None, "", []
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            if open_at is None:
                open_at, lang, body = n, line.lstrip()[3:].strip(), []
            else:
                assert line.strip() == "```", f"README.md:{n}: a closing fence takes no info string: {line!r}"
                blocks.append((open_at, lang, "\n".join(body) + "\n"))
                open_at = None
        elif open_at is not None:
            body.append(line)
    assert open_at is None, f"README.md:{open_at}: the code block is never closed"
    return blocks


BLOCKS = _blocks(README)


def test_blocks_found():
    assert [lang for _, lang, _ in BLOCKS].count("python") >= 2 and len(BLOCKS) >= 4, BLOCKS


def _run(cmd: list[str], cwd: Path, timeout: int = 180) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{shlex.join(cmd)} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return r


@functools.cache
def _small_model() -> bytes:
    from vkinfer.testing import zoo

    return zoo.quantize(zoo.mobilenet_v2(width=0.35, size=32, num_classes=10), seed=0).SerializeToString()


@functools.cache
def _small_tflite() -> bytes:
    from vkinfer.testing import tflite_zoo

    return tflite_zoo.tiny_cnn(seed=0, dtype="int8")


def _prepare(cwd: Path) -> np.ndarray:
    """model.onnx (a small quantized zoo MobileNetV2) and x.npy (an input for it) in `cwd`; returns x."""
    (cwd / "model.onnx").write_bytes(_small_model())
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(cwd / "x.npy", x)
    return x


def _vkinfer_line(line: str, cwd: Path) -> None:
    """One `vkinfer ...` line: every optional [part] left out, then all given; each run checked."""
    import vkinfer

    assert VKINFER.is_file(), f"{VKINFER} missing: `make setup` installs vkinfer (and its console script) editable"
    forms = dict.fromkeys([re.sub(r"\s*\[[^\]]*\]", "", line), re.sub(r"\[([^\]]*)\]", r"\1", line)])
    for form in forms:
        args = shlex.split(form, comments=True)[1:]
        for old in cwd.iterdir():  # each form starts from the same two files
            old.unlink()
        x = _prepare(cwd)
        r = _run([str(VKINFER), *args], cwd)
        if args[0] == "devices":
            assert "ISA variants: scalar" in r.stdout, r.stdout
        elif args[0] == "info":
            assert "MACs" in r.stdout, r.stdout
            if "auto" in args:  # the dispatcher's table, when it had a choice to make
                assert "predicted (" in r.stdout and "against: all-cpu" in r.stdout or \
                    "no dispatcher" in r.stdout, r.stdout[-3000:]
        elif args[0] == "calibrate":
            assert "cpu at 1 thread(s)" in r.stdout and "gemm" in r.stdout, r.stdout[-3000:]
        elif args[0] == "run":
            assert ("--input" in args) != ("notice: no --input given" in r.stderr), r.stderr
            if "--output" in args:
                assert "--input" in args
                sess = vkinfer.InferenceSession(_small_model(), device="reference")
                want = run_devices(_small_model(), {sess.get_inputs()[0].name: x})
                got = np.load(cwd / args[args.index("--output") + 1])
                assert len(got.files) == len(want)
                for g, w in zip(got.values(), want, strict=True):
                    np.testing.assert_array_equal(g, w)
        else:
            pytest.fail(f"README runs `vkinfer {args[0]}`, which this test does not check yet")


def _make_line(args: list[str]) -> None:
    assert len(args) == 2 and not args[1].startswith("-"), f"expected `make <target>`, got {args}"
    out = _run(["make", "-n", args[1]], ROOT, timeout=60).stdout
    assert args[1] in MAKE_RECIPES, f"no expected recipe for `make {args[1]}` in MAKE_RECIPES"
    assert MAKE_RECIPES[args[1]] in out, out[-3000:]


@pytest.mark.parametrize("line,lang,body", BLOCKS, ids=[f"{lang or 'plain'}-line{n}" for n, lang, _ in BLOCKS])
def test_block_runs(line, lang, body, tmp_path):
    if lang == "python":
        _prepare(tmp_path)  # the quickstarts' model.onnx and model.tflite
        (tmp_path / "model.tflite").write_bytes(_small_tflite())
        (tmp_path / "block.py").write_text(body)
        _run([sys.executable, "block.py"], tmp_path)
    elif lang == "sh":
        lines = [s for s in body.splitlines() if shlex.split(s, comments=True)]
        assert lines
        for s in lines:
            args = shlex.split(s, comments=True)
            if args[0] == "make":
                _make_line(args)
            elif args[0] == "vkinfer":
                _vkinfer_line(s, tmp_path)
            else:
                pytest.fail(f"README.md:{line}: no way to run `{s}` here: teach test_readme.py")
    else:
        pytest.fail(f"README.md:{line}: a ```{lang} block, which test_readme.py does not know how to run")


# ---- numbers and lists the README states ----


def _section(start: str, stop: str = "\n- ") -> str:
    """The README text from `start` up to the next `stop` after it."""
    i = README.index(start)
    j = README.find(stop, i + len(start))
    return README[i:j if j >= 0 else None]


def test_driver_case_count():
    """The C driver runs every vector tests/support/cpu_vectors.py writes (test_cpu_native checks "N read, N run")."""
    from support.cpu_vectors import default_cases

    m = re.findall(r"reference vectors \((\d+) cases\)", README)
    assert m == [str(len(default_cases()))]


def test_cpu_variant_list():
    """The **Variants** bullet names exactly cpu_fallback/src/isa.c's list, in its order."""
    import vkinfer.cpu

    isa = (ROOT / "cpu_fallback" / "src" / "isa.c").read_text()
    table = isa[isa.index("ISAS[] = {"):isa.index("};", isa.index("ISAS[] = {"))]
    names = re.findall(r"&vki_isa_(\w+)", table)
    bullet = _section("- **Variants**")
    assert [t for t in re.findall(r"`([^`]+)`", bullet) if re.fullmatch(r"\w+", t)] == names
    assert {n for n, _ in vkinfer.cpu.variants()} <= set(names)


def test_requirements_list():
    """Set-up step 2 names every package of requirements.txt, and only those."""
    pinned = [ln.split("==")[0].strip().lower() for ln in (ROOT / "requirements.txt").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]
    step = _section("2. A virtual environment", "\n3. ")
    listed = re.search(r"`requirements\.txt` \(([^)]*)\)", step, re.S)
    assert listed, step
    assert sorted(p.strip().lower() for p in listed[1].split(",")) == sorted(pinned)


def test_conv_table_dimensions():
    """The conv edge-case table's channels, kernels, strides and dilations as tests/support/cases.py has them."""
    from support import cases

    m = re.search(r"channels\s+(\d+)-(\d+)\s+incl\.\s+odd\s+counts\s+x\s+kernels\s+([\d/]+)\s+x\s+strides\s+([\d/]+)"
                  r"\s+x\s+dilations\s+([\d/]+)", README)
    assert m, "the Tests section no longer describes the conv table's dimensions"
    assert (int(m[1]), int(m[2])) == (min(cases.CHANNELS), max(cases.CHANNELS))
    assert any(c % 2 for c in cases.CHANNELS)
    for text, values in zip(m.groups()[2:], (cases.KERNELS, cases.STRIDES, cases.DILATIONS), strict=True):
        assert [int(v) for v in text.split("/")] == values


def test_kernel_table():
    """The shader table lists exactly vkinfer.vulkan.KERNELS, each a shader file."""
    from vkinfer.vulkan import KERNELS

    rows = re.findall(r"^\| `(\w+)` \|", README, re.M)
    assert sorted(rows) == sorted(KERNELS)
    assert all((ROOT / "shaders" / f"{k}.comp").is_file() for k in rows)


# ---- the front door ----


def test_front_door_is_short_and_its_links_exist():
    """The README stays a front door (at most 150 lines); every relative link in it names a file that exists."""
    assert len(FRONT.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#:]+)\)", FRONT)
    assert links and all((ROOT / link).is_file() for link in links), links


def test_op_tables_are_generated_from_the_registry():
    """The README's op summary and docs/ops.md are what `python -m vkinfer.optable` prints now (regenerate them
    with it when an op gains or loses a lowering)."""
    from vkinfer import optable

    m = re.search(r"<!-- optable:begin -->\n(.*?)<!-- optable:end -->", FRONT, re.S)
    assert m and m[1] == optable.compact()
    assert (ROOT / "docs" / "ops.md").read_text() == optable.full()
    onnx = optable.onnx_support()
    assert {"cpu", "vulkan"} <= onnx["QLinearConv"] and onnx["NonMaxSuppression"] == set()  # not a table of nothing

