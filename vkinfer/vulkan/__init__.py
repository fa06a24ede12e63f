"""Vulkan backend: prepared ops recorded into one command sequence per run.

`Executable` holds one prepared op with its own staged input/output buffers and a sequence
recorded once (upload, barrier, dispatch, barrier, download); `Chain` records many dependent
convolutions into one sequence with a barrier between each, replayed with one submit per run.
"""

from __future__ import annotations

import numpy as np

from .._cache import LayerCache
from .._vk import Device, get_device
from ..layout import nchw_to_packed, packed_to_nchw, rows_to_packed
from ..reference._spec import ConvSpec, MatMulSpec
from .gemm_tiles import TILES, GemmConfig, autotune, gemm_config
from .qlinear_conv import KERNELS, QLinearConv, choose_kernel, gemm_shared_tile
from .qlinear_matmul import QLinearMatMul, choose_matmul_kernel

__all__ = ["KERNELS", "TILES", "GemmConfig", "QLinearConv", "QLinearMatMul", "Executable", "Chain", "autotune",
           "choose_kernel", "choose_matmul_kernel", "gemm_config", "gemm_shared_tile", "run_conv", "run_matmul"]


class Executable:
    """One prepared op with its buffers and a recorded sequence; `run(x)` is upload, submit, download."""

    def __init__(self, op: QLinearConv | QLinearMatMul, dev: Device):
        self.op, self.dev = op, dev
        self.x = dev.buffer(4 * op.in_words)
        self.y = dev.buffer(4 * op.out_words)
        self.prog = op.bind(self.x, self.y)
        self.seq = dev.sequence()
        self.seq.barrier()  # earlier replays' reads of x and y finish before we overwrite them
        self.seq.upload(self.x)
        self.seq.barrier()
        self.seq.dispatch(self.prog)
        self.seq.barrier()
        self.seq.download(self.y)
        self.seq.barrier()

    def run_packed(self, words: np.ndarray) -> np.ndarray:
        """Packed input words in, packed output words out: upload, one submit, download."""
        with self.dev.lock:  # the buffers are shared by every caller of this executable
            self.x.write(words)
            self.seq.run()
            return self.y.read(np.uint32, self.op.out_words)

    def run(self, x: np.ndarray) -> np.ndarray:
        """numpy in (NCHW for conv, (batch, M, K) for matmul), numpy out."""
        op = self.op
        if isinstance(op, QLinearConv):
            out = self.run_packed(nchw_to_packed(x))
            return packed_to_nchw(out, op.out_shape, op.spec.out.dtype)
        s = op.spec
        out = self.run_packed(rows_to_packed(x))
        n = s.b.shape[2]
        return out.view(np.uint8).reshape(-1, 4 * ((n + 3) // 4))[:, :n].view(s.out.dtype).reshape(s.out_shape)


class Chain:
    """Dependent convolutions (each one's output is the next one's input) recorded once into one
    sequence, with a global barrier between dispatches, replayed with one submit per `run`.

    `_barriers=False` leaves the barriers between dispatches out: a negative control for the
    synchronization-validation test, never for real use.
    """

    def __init__(self, specs: list[ConvSpec], dev: Device | None = None, *, _barriers: bool = True):
        if not specs:
            raise ValueError("a chain needs at least one convolution")
        for a, b in zip(specs, specs[1:], strict=False):
            if a.out_shape != b.x.shape or a.out.dtype != b.x.dtype:
                raise ValueError(f"chain break: {a.out_shape} {a.out.dtype} feeds {b.x.shape} {b.x.dtype}")
        self.dev = dev or get_device()
        self.ops = [QLinearConv(s, self.dev) for s in specs]
        self.x = self.dev.buffer(4 * self.ops[0].in_words)
        self.y = self.dev.buffer(4 * self.ops[-1].out_words)
        # Intermediates live in device-only memory; two ping-pong buffers of the largest size.
        inner = max([4 * op.out_words for op in self.ops[:-1]], default=4)
        tmp = [self.dev.buffer(inner, staged=False) for _ in range(2)]
        bufs = [self.x] + [tmp[i % 2] for i in range(len(self.ops) - 1)] + [self.y]
        self.progs = [op.bind(bufs[i], bufs[i + 1]) for i, op in enumerate(self.ops)]
        self.seq = self.dev.sequence()
        self.seq.barrier()
        self.seq.upload(self.x)
        self.seq.barrier()
        for i, p in enumerate(self.progs):
            if i and _barriers:
                self.seq.barrier()
            self.seq.dispatch(p)
        self.seq.barrier()
        self.seq.download(self.y)
        self.seq.barrier()

    def run(self, x: np.ndarray) -> np.ndarray:
        """The chain on NCHW input `x`: upload, one submit for every layer, download."""
        first, last = self.ops[0], self.ops[-1]
        if x.shape != first.in_shape or x.dtype != first.spec.x.dtype:
            raise ValueError(f"chain input must be {first.in_shape} {first.spec.x.dtype}, got {x.shape} {x.dtype}")
        words = nchw_to_packed(x)
        with self.dev.lock:
            self.x.write(words)
            self.seq.run()
            out = self.y.read(np.uint32, last.out_words)
        return packed_to_nchw(out, last.out_shape, last.spec.out.dtype)


# Prepared executables for the op-level API: calling the same layer again reuses its packed
# weights, pipeline and buffers. Keyed by the Device object (id: a cached executable holds its device alive, so
# the id is not reused meanwhile), not its index: two logical devices on one GPU (the integer-dot-product one
# and the scalar one, say) never share buffers or pipelines.
_CACHE = LayerCache()


def run_conv(s: ConvSpec, dev: Device | None = None) -> np.ndarray:
    """QLinearConv of a validated spec on `dev`, reusing a cached prepared layer when there is one."""
    dev = dev or get_device()
    ex = _CACHE.get(("conv", id(dev), gemm_config(dev), s.x.shape, s.x.dtype.str, s.x_zp, s.strides,
                     s.pads, s.dilations, s.group, s.out.zero_point, s.out.lo, s.out.hi, s.out.dtype.str),
                    [s.w, s.w_zp, s.bias, s.out.m], lambda: Executable(QLinearConv(s, dev), dev))
    return ex.run(s.x)


def run_matmul(s: MatMulSpec, dev: Device | None = None) -> np.ndarray:
    """QLinearMatMul of a validated spec on `dev`, reusing a cached prepared layer when there is one."""
    dev = dev or get_device()
    ex = _CACHE.get(("matmul", id(dev), gemm_config(dev), s.a.shape, s.a.dtype.str, s.a_zp,
                     s.out.zero_point, s.out.lo, s.out.hi, s.out.dtype.str, s.out_shape),
                    [s.b, s.b_zp, s.out.m], lambda: Executable(QLinearMatMul(s, dev), dev))
    return ex.run(s.a)
