"""proxy.allocator: after tune_allocator, a 256 KiB buffer (uvloop's TLS read buffer) is mmap'd
even after a larger one was freed, which without it raises glibc's dynamic mmap threshold and
puts the next ones on the heap. Each case runs in a fresh interpreter: the threshold is
process-wide and one-way."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import ctypes, sys
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
if sys.argv[1] == "tuned":
    from proxy.allocator import tune_allocator
    assert tune_allocator()
libc.free(libc.malloc(300 * 1024))  # glibc raises its dynamic threshold past this size on free
buffer = libc.malloc(256 * 1024)
IS_MMAPPED = 2  # glibc malloc.c: bit of the chunk's size field, one word before the pointer
print("mmapped" if ctypes.c_size_t.from_address(buffer - ctypes.sizeof(ctypes.c_size_t)).value & IS_MMAPPED else "heap")
"""


@pytest.mark.parametrize(("mode", "where"), [("plain", "heap"), ("tuned", "mmapped")])
def test_tls_read_buffers_stay_mapped_after_the_threshold_is_fixed(mode: str, where: str) -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.strip() == where


def test_heap_usage_follows_what_the_process_allocates_and_frees() -> None:
    """8 MiB in 64 KiB blocks (below MMAP_THRESHOLD: heap chunks) raise in_use_bytes by about
    that much; freed, the bytes leave in_use_bytes (free until glibc trims them)."""
    import ctypes

    from proxy.allocator import heap_usage

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    before = heap_usage()
    assert before is not None and set(before) == {"heap_bytes", "in_use_bytes", "free_bytes", "mmapped_bytes"}
    blocks = [libc.malloc(64 * 1024) for _ in range(128)]
    held = heap_usage()
    for block in blocks:
        libc.free(block)
    after = heap_usage()
    assert held is not None and after is not None
    assert held["in_use_bytes"] - before["in_use_bytes"] >= 8 * 2**20
    assert held["in_use_bytes"] - after["in_use_bytes"] >= 8 * 2**20
    assert held["heap_bytes"] >= held["in_use_bytes"]


def test_release_free_heap_gives_freed_pages_back() -> None:
    """8 MiB in 64 KiB heap chunks, freed, are pages glibc keeps; release_free_heap (malloc_trim)
    gives them back and says so."""
    import ctypes

    from proxy.allocator import release_free_heap

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    release_free_heap()
    blocks = [libc.malloc(64 * 1024) for _ in range(128)]
    for block in blocks:
        ctypes.memset(block, 1, 64 * 1024)  # touched: resident until given back
    for block in blocks:
        libc.free(block)
    assert release_free_heap() is True


def test_the_c_library_is_loaded_once_per_function() -> None:
    from proxy.allocator import _libc_function

    assert _libc_function("mallinfo2") is _libc_function("mallinfo2") is not None
    assert _libc_function("no_such_function_in_libc") is None


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


async def test_the_periodic_trim_gives_freed_pages_back_and_counts_itself() -> None:
    """8 MiB of touched 64 KiB heap chunks, freed, stay resident until trim_free_heap's next
    turn gives them back; each turn is counted with its CPU seconds in TRIMS."""
    import asyncio
    import ctypes

    from proxy.allocator import TRIMS, release_free_heap, trim_free_heap

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    release_free_heap()
    blocks = [libc.malloc(64 * 1024) for _ in range(128)]
    top = libc.malloc(64 * 1024)  # above them: the freed blocks are a hole, not the heap's top
    for block in blocks:
        ctypes.memset(block, 1, 64 * 1024)
    for block in blocks:
        libc.free(block)
    held = _resident_bytes()
    before = TRIMS.trims
    task = asyncio.create_task(trim_free_heap(interval=0.05))
    try:
        for _ in range(100):
            await asyncio.sleep(0.05)
            if TRIMS.trims >= before + 2:
                break
    finally:
        task.cancel()
    assert TRIMS.trims >= before + 2 and 0 < TRIMS.longest_seconds <= TRIMS.seconds
    assert held - _resident_bytes() >= 6 * 2**20  # the hole's pages are no longer resident
    libc.free(top)
