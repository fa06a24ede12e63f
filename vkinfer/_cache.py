"""vkinfer's caches: the op-level API's LRU of prepared layers, and the on-disk cache files (SPIR-V, Vulkan
pipeline caches, calibration entries, the Vulkan device list), which every user reads and writes through here.

A cache file is verified, never trusted (issue 26: a truncated SPIR-V entry crashed the driver, two swapped
entries gave wrong answers, a symlink to /dev/zero was read until the process was killed, a FIFO hung):
- `read_file` opens only a regular file of bounded size: O_NOFOLLOW (a symlink at an entry's name is refused, so
  nothing outside the cache folder is read through it) and O_NONBLOCK (a FIFO does not block the open), then
  fstat S_ISREG and the size before one byte is read, and at most `max_bytes + 1` bytes are ever read.
- `Entries` stores each payload behind a header line carrying the format, the kind, the entry's key (a hash of
  everything it was built from, so a renamed or swapped entry is detected) and the payload's length and SHA-256.
  Anything off: a RuntimeWarning naming the file, the entry is ignored and rebuilt (and rewritten).
- `write_file` writes a temp file made by mkstemp in the cache folder (O_CREAT | O_EXCL, a random name: a
  planted symlink is never followed, whatever its name) and renames it over the entry with os.replace (which
  replaces a symlink at the entry's name, not its target).
- A cache folder that cannot be used (read-only, a file in its place, not creatable) turns into an in-memory
  cache for this process, with one RuntimeWarning per folder: sessions keep working, only slower to start.
This module imports the standard library only at import time: vkinfer/_native/build_spirv.py imports _glsl, and
so this module, in a build environment without numpy.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


class LayerCache:
    """LRU of prepared layers keyed by a parameter tuple, verified by the constant arrays' contents.

    A hit needs equal parameters *and* equal constant arrays. The arrays are compared against copies kept in the
    cache (memcmp speed), not hashed: hashing a 1 MB weight tensor on every call costs more than running the
    layer, and comparing copies also catches weights edited in place."""

    def __init__(self, size: int = 16):
        self.size = size
        self._entries: OrderedDict[int, tuple[tuple, list[np.ndarray], Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._next = 0

    def get(self, params: tuple, arrays: list[np.ndarray], make: Callable[[], Any]) -> Any:
        """The prepared layer for (params, arrays), made by `make()` on a miss."""
        import numpy as np  # noqa: PLC0415 - see the module's docstring (stdlib only at import time)

        with self._lock:
            for slot, (p, arrs, op) in self._entries.items():
                if p == params and all(a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)
                                       for a, b in zip(arrs, arrays, strict=True)):
                    self._entries.move_to_end(slot)
                    return op
            op = make()
            self._entries[self._next] = (params, [np.array(a, copy=True) for a in arrays], op)
            self._next += 1
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            return op


_trim: Any = None  # glibc's malloc_trim once looked up, False where the C library has none (musl, macOS)


def release_freed_memory() -> None:
    """Give the C heaps' free pages back to the system (glibc's malloc_trim(0)); nothing where there is none.

    Called when a session evicts a compiled plan (vkinfer/session.py), which is freed at once (compiler/native.py
    holds its plan weakly). glibc keeps the freed pages of its heaps resident, the main one and each thread's arena
    (lavapipe compiles pipelines on worker threads), so RSS climbed with every new batch size. Fuzz seed moves_u8,
    batch 1..60 four times on lavapipe with specialized pipelines (a GPU's default; VKINFER_PUSH_SHAPES=0): RSS
    267/281/286/288 MB after each pass without this, 244/245/245/246 with it; batch 1..400 once with pushed shapes
    (lavapipe's default): 176 -> 193 MB, 174 -> 181 with it; device="cpu": 100 -> 102, 98 -> 100. A call costs a
    median 35 us (cpu) to 360 us (lavapipe), against 1.5 and 16.6 ms to compile the plan that replaced it."""
    global _trim
    if _trim is None:
        import ctypes  # noqa: PLC0415 - only where a plan is evicted

        try:
            fn = ctypes.CDLL(None).malloc_trim
            fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
            _trim = fn
        except (OSError, AttributeError):
            _trim = False
    if _trim:
        _trim(0)  # a ctypes call: the GIL is released meanwhile


# --- cache files ------------------------------------------------------------------------------------------------

def root() -> Path:
    """vkinfer's cache folder: $VKINFER_CACHE, else $XDG_CACHE_HOME/vkinfer or ~/.cache/vkinfer (read at each
    call: tests and embedders change it at run time)."""
    base = os.environ.get("VKINFER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vkinfer")
    return Path(base)


class UnsafeFileError(OSError):
    """A cache (or profile) file refused before it was read: not a regular file, a symlink, or too large.
    `strerror` says why in words, so callers that report `e.strerror` name the reason."""


def _kind_of(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return what
    return "not a regular file"


def read_file(path: str | os.PathLike, max_bytes: int, *, follow_symlinks: bool = False) -> bytes:
    """The bytes of `path`, a regular file of at most `max_bytes` bytes. Raises FileNotFoundError when it is
    missing (NotADirectoryError when a parent is a file), UnsafeFileError (an OSError naming why) for a symlink
    (unless `follow_symlinks`), a FIFO, a device, a directory or a file over `max_bytes`, and OSError when it
    cannot be read. Never blocks on a FIFO and never reads more than `max_bytes + 1` bytes."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_symlinks:
            raise UnsafeFileError(errno.ELOOP, "a symbolic link (never followed in a cache)", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(errno.EINVAL, f"{_kind_of(st.st_mode)}, not a regular file", str(path))
        if st.st_size > max_bytes:
            raise UnsafeFileError(errno.EFBIG, f"{st.st_size} bytes, over the {max_bytes}-byte limit", str(path))
        chunks, left = [], max_bytes + 1  # +1: a file that grew since fstat is seen to be too large
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise UnsafeFileError(errno.EFBIG, f"grew past the {max_bytes}-byte limit while read", str(path))
        return data
    finally:
        os.close(fd)


#: tempfile.mkstemp, looked up here so that tests can make a folder refuse new files (root ignores chmod).
_mkstemp = tempfile.mkstemp


def write_file(path: str | os.PathLike, data: bytes, *, fsync: bool = False) -> None:
    """Write `data` to `path` atomically: a temp file from mkstemp in the same folder (O_EXCL, a random name,
    mode 0600, no symlink followed), then os.replace. Creates the folder. Raises OSError when it cannot."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_unusable: set[str] = set()  # cache folders already warned about (one warning per folder and process)
_memory: dict[str, bytes] = {}  # path -> file contents, for entries whose folder cannot be written
_memory_bytes = 0
#: The in-memory fallback keeps at most this much (the SPIR-V of every shader is about 1 MB).
MEMORY_LIMIT = 256 << 20
_lock = threading.Lock()


def store(path: str | os.PathLike, data: bytes, *, what: str = "cache") -> bool:
    """Write a cache file (`write_file`); when it cannot be written, keep `data` in memory for this process
    (`recall`) and warn once per folder. Returns True when it is on disk."""
    global _memory_bytes
    path = Path(path)
    try:
        write_file(path, data)
    except OSError as e:
        with _lock:
            old = _memory.pop(str(path), b"")
            _memory_bytes -= len(old)
            if _memory_bytes + len(data) <= MEMORY_LIMIT:
                _memory[str(path)] = data
                _memory_bytes += len(data)
            first = str(path.parent) not in _unusable
            _unusable.add(str(path.parent))
        if first:
            warnings.warn(f"vkinfer: cannot write {what} file {path} ({e.strerror or e}); keeping {what} "
                          "entries of this folder in memory for this process instead (warned once per folder)",
                          RuntimeWarning, stacklevel=3)
        return False
    with _lock:
        _memory_bytes -= len(_memory.pop(str(path), b""))
    return True


def recall(path: str | os.PathLike) -> bytes | None:
    """What `store` kept in memory for `path` (because its folder could not be written), else None."""
    with _lock:
        return _memory.get(str(Path(path)))


def fetch(path: str | os.PathLike, max_bytes: int) -> tuple[bytes | None, str]:
    """A cache file's bytes: what `store` kept in memory for it, else the file (`read_file`, at most `max_bytes`).
    (None, "") when there is none; (None, why) when it cannot be read (the OSError's reason)."""
    data = recall(path)
    if data is not None:
        return data, ""
    try:
        return read_file(path, max_bytes), ""
    except (FileNotFoundError, NotADirectoryError):
        return None, ""
    except OSError as e:
        return None, str(e.strerror or e)


# --- verified entries ---------------------------------------------------------------------------------------------

MAGIC = b"vkinfer-cache"
FORMAT = 1
_HEADER_MAX = 256


def key_of(*parts: object) -> str:
    """An entry's key: the SHA-256 (hex) of the repr of what it was built from (and of this file format, so that
    files of an older format are at other names: never read, never warned about)."""
    return hashlib.sha256(repr((MAGIC, FORMAT, *parts)).encode()).hexdigest()


def pack(kind: str, key: str, payload: bytes) -> bytes:
    """A cache file: one ASCII header line (magic, format, kind, key, payload length, payload SHA-256), then the
    payload."""
    head = b" ".join([MAGIC, str(FORMAT).encode(), kind.encode(), key.encode(), str(len(payload)).encode(),
                      hashlib.sha256(payload).hexdigest().encode()]) + b"\n"
    return head + payload


def unpack(blob: bytes, kind: str, key: str) -> tuple[bytes | None, str]:
    """(payload, "") when `blob` is a sound `kind` cache file for `key`, else (None, why)."""
    end = blob.find(b"\n", 0, _HEADER_MAX)
    if end < 0:
        return None, f"no header ({len(blob)} bytes, truncated or not a vkinfer cache file)"
    fields = blob[:end].split(b" ")
    if len(fields) != 6 or fields[0] != MAGIC:
        return None, "not a vkinfer cache file (bad header)"
    fmt, theirs_kind, theirs_key, n, digest = (f.decode(errors="replace") for f in fields[1:])
    if fmt != str(FORMAT):
        return None, f"cache format {fmt}, this vkinfer reads {FORMAT}"
    if theirs_kind != kind:
        return None, f"a {theirs_kind} entry, not a {kind} one"
    if theirs_key != key:
        return None, "written for another key (a renamed or swapped entry)"
    payload = blob[end + 1:]
    if not n.isdigit() or int(n) != len(payload):
        return None, f"truncated or padded (payload of {len(payload)} bytes, header says {n})"
    if hashlib.sha256(payload).hexdigest() != digest:
        return None, "corrupt (payload checksum mismatch)"
    return payload, ""


class Entries:
    """One kind of verified cache entry in `root()/<kind>/`: payloads of at most `max_bytes`, each stored with
    its key (`pack`). `check(payload) -> why` (optional) vets a payload whose header is sound (defence in depth,
    e.g. the SPIR-V magic number)."""

    def __init__(self, kind: str, max_bytes: int, check: Callable[[bytes], str] | None = None):
        self.kind, self.max_bytes, self.check = kind, max_bytes, check

    def folder(self) -> Path:
        return root() / self.kind

    def path(self, name: str) -> Path:
        return self.folder() / name

    def present(self, name: str) -> bool:
        """Cheaply: is there something at the entry's name (in memory, or a regular file not followed)?"""
        p = self.path(name)
        if recall(p) is not None:
            return True
        try:
            return stat.S_ISREG(os.lstat(p).st_mode)
        except OSError:
            return False

    def get(self, name: str, key: str) -> bytes | None:
        """The payload stored under `name` for `key`, or None: missing (silently) or refused (a RuntimeWarning
        naming the file and why; the caller rebuilds and `put`s, which replaces it)."""
        p = self.path(name)
        blob = recall(p)
        if blob is None:
            try:
                blob = read_file(p, self.max_bytes + _HEADER_MAX)
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as e:
                return self._refuse(p, f"unreadable ({e.strerror or e})")
        payload, why = unpack(blob, self.kind, key)
        if payload is None:
            return self._refuse(p, why)
        why = self.check(payload) if self.check is not None else ""
        return payload if not why else self._refuse(p, why)

    def put(self, name: str, key: str, payload: bytes) -> bool:
        """Store `payload` under `name` for `key` (on disk, else in memory with one warning per folder)."""
        return store(self.path(name), pack(self.kind, key, payload), what=f"{self.kind} cache")

    def _refuse(self, path: Path, why: str) -> None:
        warnings.warn(f"vkinfer: ignoring {self.kind} cache file {path}: {why}; rebuilding it", RuntimeWarning,
                      stacklevel=4)
        return None


# --- JSON cache files (calibration entries, the Vulkan device list): readable JSON with a stamp inside ----------

STAMP = "cache"


def _digest(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != STAMP}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def stamp_json(doc: dict, key: str) -> bytes:
    """`doc` as JSON with a field "cache": {"format", "key", "sha256"} (the key, and a SHA-256 of the rest
    of the document in canonical form), so that the file stays readable JSON."""
    out = {k: v for k, v in doc.items() if k != STAMP}
    out[STAMP] = {"format": FORMAT, "key": key, "sha256": _digest(out)}
    return json.dumps(out, indent=1, sort_keys=True).encode()


def unstamp_json(blob: bytes, key: str) -> tuple[dict | None, str]:
    """(document without its stamp, "") when `blob` is stamped JSON for `key` whose contents match the stamp,
    else (None, why). Why starts with "no cache stamp" when the document is JSON without one."""
    try:
        doc = json.loads(blob)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        return None, f"not JSON ({e})"
    if not isinstance(doc, dict):
        return None, f"not a JSON object ({type(doc).__name__})"
    st = doc.get(STAMP)
    if not isinstance(st, dict):
        return None, "no cache stamp (not written by this vkinfer)"
    if st.get("format") != FORMAT:
        return None, f"cache format {st.get('format')!r}, this vkinfer reads {FORMAT}"
    if st.get("key") != key:
        return None, "written for another key (a renamed or swapped entry)"
    if st.get("sha256") != _digest(doc):
        return None, "checksum mismatch (edited or damaged)"
    return {k: v for k, v in doc.items() if k != STAMP}, ""
