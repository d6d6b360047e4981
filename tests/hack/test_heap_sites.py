"""bench.heap_sites: from a heaptrack event stream written by hand in its format (hex numbers,
`+`/`-` allocations and frees of an allocation kind, `c` the time in ms), a site whose
allocations are never freed rises mark after mark, one whose live set is replaced stays level,
and allocations of the mmap threshold or more are counted apart (glibc maps them unless a free
chunk of its heap fits)."""

from __future__ import annotations

from bench.heap_sites import read, report
from proxy.allocator import MMAP_THRESHOLD


def _stream() -> list[bytes]:
    lines = ["v 10400 3", "s 6 malloc", "s a leaky_site", "s b steady_site", "s 8 uv_alloc", "s 4 main",
             "i 10 1 1", "i 20 1 2", "i 30 1 3", "i 40 1 4", "i 50 1 5",
             "t 5 0",  # trace 1: main
             "t 2 1", "t 1 2",  # traces 2, 3: main > leaky_site > malloc
             "t 3 1", "t 1 4",  # traces 4, 5: main > steady_site > malloc
             "t 4 1",  # trace 6: main > uv_alloc (no plumbing below)
             f"a 1000 3", "a 2000 5", f"a {MMAP_THRESHOLD:x} 6"]
    for minute in range(10):
        lines.append(f"c {minute * 60_000:x}")
        lines.append("+ 0")  # 4 KiB a minute, never freed
        lines.append("+ 1")
        if minute:
            lines.append("- 1")  # 8 KiB live at any time, replaced each minute
        lines.append("+ 2")
        lines.append("- 2")
        lines.append("+ 2")  # one more large buffer live each minute
    lines.append(f"c {10 * 60_000:x}")
    return [(line + "\n").encode() for line in lines]


def test_a_leak_rises_a_replaced_live_set_stays_level_and_large_allocations_are_counted_apart() -> None:
    doc = report(read(_stream(), [2, 5, 8]), top=5)
    assert doc["marks_min"] == [2, 5, 8, "end"]
    sites = {row["site"]: row["live_mib"] for row in doc["sites"]}  # type: ignore[union-attr]
    kib = 1 / 1024
    assert sites["leaky_site < main"] == [round(n * 4 * kib, 2) for n in (2, 5, 8, 10)]
    assert sites["steady_site < main"] == [round(8 * kib, 2)] * 4
    assert set(sites) == {"leaky_site < main", "steady_site < main"}
    assert doc["sites"][0]["site"] == "leaky_site < main"  # type: ignore[index]
    assert doc["large_live_mib"] == [round(n * MMAP_THRESHOLD / 2**20, 2) for n in (2, 5, 8, 10)]
