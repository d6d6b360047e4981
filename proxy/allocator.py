"""The C allocator's settings for a process holding thousands of TLS connections.

uvloop gives every TLS connection a 256 KiB read buffer (`SSL_READ_MAX_SIZE`, sslproto.pyx,
malloc'd for the connection's life) of which a kubelet's connection touches a few KiB. glibc
serves an allocation that large from mmap, so only touched pages are resident, until the first
such buffer is freed: glibc then raises its mmap threshold above 256 KiB (its dynamic
threshold) and later buffers come from the heap, where pages touched by earlier bodies (a list
answer, a freed connection's buffer) stay resident and fragment. Fixing the threshold at glibc's
own starting value keeps every such buffer in its own mapping: measured with
`python -m bench.fleet --kubelets 500 --sides proxy --no-storm --duration 20` on 2 cores:
115-163 KiB of proxy RSS per kubelet with the dynamic threshold (3 runs), 99-110 KiB with it
fixed here (4 runs; docs/sizing.md, "Where a kubelet's bytes go").

The threshold governs only how glibc grows its heap: a request of any size is first carved from
a free heap chunk that fits. So a connection opened while the heap has a hole of 256 KiB gets
its buffer there, and under an hour of faults (connections reopened at every partition restart)
the heap's bytes in use crept ~20 MiB in every soak (docs/benchmarks.md, "The C heap's creep is
TLS read buffers carved from the heap"). `trim_free_heap` gives the heap's free pages back every
TRIM_SECONDS, so a buffer carved from a hole costs the pages it touches, as a mapped one does."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("partition_proxy.allocator")

# mallopt(3) parameter: allocations of at least this many bytes are mmap'd (and unmapped on free).
_M_MMAP_THRESHOLD = -3
# bytes: glibc's default starting threshold (DEFAULT_MMAP_THRESHOLD_MIN); setting it explicitly
# turns the dynamic raise off. Below 256 KiB so uvloop's TLS read buffers are mapped unless a
# free heap chunk fits them (see TRIM_SECONDS).
MMAP_THRESHOLD = 128 * 1024
# seconds between two trims of the heap's free pages (trim_free_heap). Fixing the threshold does
# not keep every read buffer mapped: glibc serves a request of any size from a free heap chunk
# that fits, and a connection opened while the heap has a hole of 256 KiB gets its buffer
# there, resident whole when the hole's pages were. Trimmed, a hole's pages are not resident,
# and a buffer carved from it costs the pages its reads touch, as a mapped one does. One trim
# took 0.64 ms of CPU on average, 2.0 ms at most, in the soak's hour at 1,000 kubelets (365
# trims; docs/benchmarks.md, "A trim of the heap's free pages every 10 s"): 0.006 % of a core at
# this period, which is short next to the soak's 90 s between faults.
TRIM_SECONDS = 10.0


@functools.cache
def _libc_function(name: str) -> Any:
    """The C library's function `name` (a ctypes function pointer), None where the library or
    the function is missing. Loaded once per name: each ctypes.CDLL makes new function pointer
    types, which are reference cycles, and the library search runs a subprocess."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None


def tune_allocator() -> bool:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD bytes for this process. True when set;
    False (logged at debug) where the C library is not glibc (musl, macOS)."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        log.debug("no mallopt in the C library: the allocator keeps its defaults")
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def release_free_heap() -> bool:
    """Give the C heap's free pages back to the operating system (glibc's malloc_trim(0)), so
    the RSS follows the bytes in use rather than their peak. True when glibc released any
    memory; False where it had none to release or the C library is not glibc."""
    trim = _libc_function("malloc_trim")
    if trim is None:
        return False
    trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
    return bool(trim(0))


@dataclass
class TrimStats:
    """What trim_free_heap did: trims made, CPU seconds they took in all and at most."""

    trims: int = 0
    seconds: float = 0.0
    longest_seconds: float = 0.0


TRIMS = TrimStats()  # this process's; /debug/memory reports it


async def trim_free_heap(interval: float = TRIM_SECONDS) -> None:
    """Every `interval` seconds, give the C heap's free pages back (release_free_heap), so
    that a TLS read buffer carved from a hole costs only the pages it touches (see
    TRIM_SECONDS). Counts each trim and its CPU seconds in TRIMS. Runs until cancelled; returns
    at once where the C library is not glibc."""
    if _libc_function("malloc_trim") is None:
        return
    while True:
        await asyncio.sleep(interval)
        started = time.thread_time()
        release_free_heap()
        took = time.thread_time() - started
        TRIMS.trims += 1
        TRIMS.seconds += took
        TRIMS.longest_seconds = max(TRIMS.longest_seconds, took)


class _MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (mallinfo(3), glibc >= 2.33): every field in bytes or chunks."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_usage() -> dict[str, int] | None:
    """What the C allocator holds, summed over its arenas (glibc's mallinfo2): {"heap_bytes":
    bytes its arenas took from the system (sbrk and arena mappings), "in_use_bytes": bytes of
    them allocated, "free_bytes": bytes of them free (fragments the process keeps resident
    until a free page is trimmed), "mmapped_bytes": bytes of allocations served by their own
    mapping (above MMAP_THRESHOLD)}. None where the C library has no mallinfo2 (glibc < 2.33,
    musl, macOS). Walks the arenas' free lists: for a debug endpoint, not a hot path."""
    mallinfo2 = _libc_function("mallinfo2")
    if mallinfo2 is None:
        return None
    mallinfo2.argtypes, mallinfo2.restype = (), _MallInfo2
    info = mallinfo2()
    return {"heap_bytes": info.arena, "in_use_bytes": info.uordblks, "free_bytes": info.fordblks,
            "mmapped_bytes": info.hblkhd}
