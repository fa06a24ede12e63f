"""A fuzz target with planted defects, for the engine tests (not a test module): input i's behaviour is
`behaviour(random.Random(f"{seed}:{i}"))`, so a test knows what each input does before the campaign runs it."""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np

from vkinfer.testing.fuzz.check import Finding, compare, nonclean
from vkinfer.testing.fuzz.targets import Target

# behaviour -> the finding kind the engine must record (None: a clean input)
KINDS = {"ok": None, "clean_error": None, "nonclean": "nonclean", "disagree": "disagree", "python_hang": "hang",
         "native_hang": "hang", "crash": "crash", "memory": "memory"}
WEIGHTS = {"ok": 8, "clean_error": 3, "nonclean": 2, "disagree": 2, "python_hang": 1, "native_hang": 1, "crash": 1,
           "memory": 1}


def behaviour(rng: random.Random) -> str:
    return rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]


class Planted(Target):
    name = "planted"

    def make(self, rng: random.Random) -> tuple[str, bytes]:
        b = behaviour(rng)
        return b, b.encode()

    def corpus(self) -> list[bytes]:
        return [b"ok"]

    def execute(self, data: bytes) -> tuple[Finding | None, tuple]:
        b = data.decode()
        ran = (b"planted " + data, None, None, b)
        one = [np.arange(4, dtype=np.float32)]
        if b == "ok":
            return compare({"reference": one, "cpu": one, "vulkan": one}), ran
        if b == "clean_error":
            e = ValueError("node 'x': refused")
            return compare({"reference": e, "cpu": e, "vulkan": e}), ran
        if b == "nonclean":
            try:
                {}["missing"]
            except KeyError as e:
                return nonclean(e, "cpu", "load"), ran
        if b == "disagree":
            return compare({"reference": one, "cpu": one, "vulkan": [one[0] + 1]}), ran
        if b == "python_hang":
            while True:
                pass
        if b == "native_hang":  # deaf to the child's own alarm: only the parent's kill ends it
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(3600)
        if b == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if b == "memory":  # deaf to the alarm too: the parent's memory watchdog ends it, long before its hang kill
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            hog = np.ones(1 << 30, np.uint8)  # 1 GiB, touched (page faults here run at about 200 MB/s)
            time.sleep(60)
            del hog
        raise AssertionError(b)


class OnlyNonclean(Target):
    """For atheris: any input starting with a byte over 127 raises a KeyError (found quickly from b"ok")."""

    name = "planted"

    def corpus(self) -> list[bytes]:
        return [b"ok", b"\xff"]

    def execute(self, data: bytes) -> tuple[Finding | None, tuple]:
        if data[:1] and data[0] > 127:
            try:
                {}["missing"]
            except KeyError as e:
                return nonclean(e, "cpu", "run"), (bytes(data), None, None, "")
        return None, (bytes(data), None, None, "")


class Clean(Target):
    """For atheris: every input clean (a second target to run beside OnlyNonclean)."""

    name = "clean"

    def corpus(self) -> list[bytes]:
        return [b"ok"]

    def execute(self, data: bytes) -> tuple[Finding | None, tuple]:
        return None, (bytes(data), None, None, "")
