"""Process-wide memory tuning of the C allocator (glibc), used by vectorised clients
(:class:`flplat.engine.vectorized.VectorizedTrainer`, ``federation.vectorize_keep_mib``). Kept apart because it
changes the whole process, not one object: it is set once, and only raised afterwards."""

from __future__ import annotations

import ctypes
import platform
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's largest mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
_retained_mib = 0  # what retain_freed_memory last set in this process


def _mallopt(param: int, value: int) -> bool:
    libc = ctypes.CDLL(None)  # the C library this process runs on
    return bool(libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)))


def retain_freed_memory(mib: int) -> bool:
    """glibc only, process-wide: serve blocks up to 32 MiB from the heap instead of fresh ``mmap`` s (which the kernel
    maps and zeroes page by page on first touch, then unmaps on free) and give the heap's free top back to the OS
    only once more than ``mib`` MiB are free there. A vectorised step's gradients are tens of MB each (50 clients
    × 0.8 MB for the FMNIST MLP) and glibc's defaults returned them to the OS every step: the kernel's page-fault
    time was ~10 % of the round (tools/benchmarks/bench_vec_bound.py, "minor page faults"). Peak memory is
    unchanged; up to ``mib`` MiB of freed memory stay with the process. No-op (False) for ``mib`` <= 0 and off glibc."""
    global _retained_mib
    if mib <= 0 or not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    if mib <= _retained_mib:
        return True
    try:
        ok = _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and _mallopt(M_TRIM_THRESHOLD, min(mib, 2047) << 20)
    except (OSError, AttributeError):
        return False
    if ok:
        _retained_mib = mib
    return ok
