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
