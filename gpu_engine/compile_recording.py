"""Recording of Triton kernel variants without a GPU, for the compile check (gpu_engine.compile_check): a
stand-in driver reports a CUDA target, and a launch binds its arguments as on that GPU and records the
variant it would compile instead of compiling and running it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Variant:
    """One specialisation of one kernel, as the runtime would compile it."""

    module: str
    name: str
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[tuple[int, ...], object], ...]
    attrs: tuple[tuple[tuple[int, ...], tuple], ...]
    num_warps: int
    num_stages: int
    dtype: str  # the model dtype of the case that launched it (spills fail only in bf16/fp16)
    where: str = field(compare=False, hash=False)  # the first case that launched it

    def label(self) -> str:
        consts = ",".join(f"{self.signature[p[0]][0]}={v}" for p, v in self.constexprs)
        return f"{self.name}[{self.dtype}; {consts}; warps={self.num_warps} stages={self.num_stages}]"


class _StandInDriver:
    """Enough of Triton's active driver for JITFunction.run to bind arguments: no device is touched."""

    def __init__(self, arch: int = 90):
        self.arch = arch

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.arch, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0


@contextmanager
def recording(arch: int = 90) -> Iterator[Callable[[str, str], list[Variant]]]:
    """Within it, Triton launches record their variant instead of compiling and running. Yields
    `take(dtype, where)`, which returns (and forgets) the variants recorded since its last call."""
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    pending: list[tuple] = []

    def record(self, key, signature, device, constexprs, options, attrs, warmup):
        pending.append((self, signature, constexprs, options, attrs))
        # JITFunction.run returns without launching

    def take(dtype: str, where: str) -> list[Variant]:
        out = [
            Variant(
                module=fn.fn.__module__,
                name=fn.fn.__name__,
                signature=tuple(signature.items()),
                constexprs=tuple(sorted(constexprs.items())),
                attrs=tuple(sorted((k, tuple(map(tuple, v))) for k, v in attrs.items())),
                num_warps=options.num_warps,
                num_stages=options.num_stages,
                dtype=dtype,
                where=where,
            )
            for fn, signature, constexprs, options, attrs in pending
        ]
        pending.clear()
        return out

    saved, saved_driver = JITFunction._do_compile, driver._active  # None without a GPU: reset_active would raise
    driver.set_active(_StandInDriver(arch))
    JITFunction._do_compile = record
    try:
        yield take
    finally:
        JITFunction._do_compile = saved
        driver._active = saved_driver
