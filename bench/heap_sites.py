"""Which allocation sites of a process keep their bytes: the C heap's live bytes per site over
time, from a heaptrack recording attached to a running replica (`heaptrack -p <pid>`, stopped
with `gdb -p <pid> -batch -ex 'call (void)heaptrack_stop()'`, which leaves the process running).

heaptrack_print answers "what was allocated and not freed by the end", which mixes a leak with
the live set of everything that turns over (cached objects replaced, connections reopened). This
reads the recording's event stream and counts, at each mark, the bytes still live of the
allocations made since the attach, per site: a site whose bytes keep rising mark after mark
leaks; one that levels off is a live set refilled (a fill). Allocations of MMAP_THRESHOLD bytes
or more are counted apart ("large_live_mib"): glibc maps such a request on its own only when no
free chunk of its heap fits it (the threshold decides how the heap grows, not where a request
goes), so some of them are in the heap's bytes in use that `/debug/memory` reports. Their live
bytes less `/debug/memory`'s mapped bytes at the same time are the ones in the heap (at 1,000
kubelets, uvloop's 256 KiB TLS read buffers: docs/benchmarks.md, "The C heap's creep is TLS read
buffers carved from the heap").

A site is named by the first C functions of its stack that are not an allocator or the
interpreter's call machinery (`_PyBytes_FromSize < bytes_concat < task_step_impl`: Python bytes
made by `a + b` in a task); heaptrack does not see Python frames.

Run: `python -m bench.heap_sites FILE.zst [--marks 2,5,10,20] [--top 25]` (marks: minutes
since the attach). One JSON document on stdout: {"marks_min", "live_mib" (every site, per mark
and at the end), "large_live_mib" (allocations of MMAP_THRESHOLD bytes or more, per mark and at
the end), "sites": [{"site", "live_mib": [per mark, then the end]}] the `top` that grew most from
the second mark to the end}.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from proxy.allocator import MMAP_THRESHOLD

# frames that name no site: the allocators and the interpreter's call machinery, by prefix
_PLUMBING = (
    "malloc", "calloc", "realloc", "_PyObject_", "PyObject_Malloc", "PyObject_Realloc", "PyObject_GC", "PyMem_", "_PyMem",
    "CRYPTO_", "_PyEval", "gen_send", "PyGen_am", "_PyFunction", "method_vectorcall", "cfunction", "type_call",
    "__Pyx_PyObject_Call", "__Pyx_Coroutine", "PyObject_Vectorcall", "heaptrack", "gc_alloc", "PyType_GenericAlloc",
    "_PyType_AllocNoTrack", "object_vacall",
)
SITE_FRAMES = 4  # functions naming a site: enough to tell a bytes concatenation in a task from one in uvloop


@dataclass
class Recording:
    """What `read` takes from a recording: the allocation kinds (size, trace), the trace tree,
    and the live count of each allocation kind at each mark (minutes since the first timestamp)."""

    strings: list[str] = field(default_factory=lambda: [""])
    functions: list[int] = field(default_factory=lambda: [0])  # per instruction pointer: its function's string
    traces: list[tuple[int, int]] = field(default_factory=lambda: [(0, 0)])  # (instruction pointer, parent trace)
    kinds: list[tuple[int, int]] = field(default_factory=list)  # (size in bytes, trace)
    marks: list[tuple[float | str, collections.Counter[int]]] = field(default_factory=list)


def read(lines: Iterable[bytes], marks_min: Sequence[float]) -> Recording:
    """Parse heaptrack's data stream (heaptrack_interpret's output: one event per line, numbers
    in hex; `+ k` / `- k` an allocation / a free of kind k, `c t` the time in ms) and count the
    live allocations of each kind at every mark and at the end ("end")."""
    rec = Recording()
    live: collections.Counter[int] = collections.Counter()
    start: float | None = None
    pending = list(marks_min)
    for line in lines:
        tag = line[:1]
        if tag == b"+":
            live[int(line[2:], 16)] += 1
        elif tag == b"-":
            live[int(line[2:], 16)] -= 1
        elif tag == b"c":
            minutes = int(line[2:], 16) / 60_000
            start = minutes if start is None else start
            while pending and minutes - start >= pending[0]:
                rec.marks.append((pending.pop(0), +live))
        elif tag == b"a":
            size, trace = line[2:].split()
            rec.kinds.append((int(size, 16), int(trace, 16)))
        elif tag == b"t":
            ip, parent = line[2:].split()
            rec.traces.append((int(ip, 16), int(parent, 16)))
        elif tag == b"i":
            fields = line[2:].split()
            rec.functions.append(int(fields[2], 16) if len(fields) > 2 else 0)
        elif tag == b"s":
            rec.strings.append(line[2:].split(b" ", 1)[1].rstrip(b"\n").decode(errors="replace"))
    rec.marks.append(("end", +live))
    return rec


def site_of(rec: Recording, trace: int) -> str:
    """The first SITE_FRAMES functions of `trace`'s stack, leaf first, without the plumbing."""
    names: list[str] = []
    while trace and len(names) < SITE_FRAMES:
        ip, trace = rec.traces[trace]
        index = rec.functions[ip] if ip < len(rec.functions) else 0
        name = rec.strings[index] if 0 < index < len(rec.strings) else ""
        if name and not name.startswith(_PLUMBING) and (not names or names[-1] != name):
            names.append(name)
    return " < ".join(names) or "?"


def large_live(rec: Recording, counts: collections.Counter[int]) -> int:
    """Bytes live in allocations of MMAP_THRESHOLD bytes or more, for one mark's counts."""
    total = 0
    for kind, n in counts.items():
        if n > 0 and kind < len(rec.kinds) and rec.kinds[kind][0] >= MMAP_THRESHOLD:
            total += rec.kinds[kind][0] * n
    return total


def live_by_site(rec: Recording, counts: collections.Counter[int]) -> collections.Counter[str]:
    """Bytes live per site for one mark's counts, allocations below MMAP_THRESHOLD only."""
    sites: dict[int, str] = {}
    out: collections.Counter[str] = collections.Counter()
    for kind, n in counts.items():
        if n <= 0 or kind >= len(rec.kinds):
            continue
        size, trace = rec.kinds[kind]
        if size < MMAP_THRESHOLD:
            out[sites.setdefault(trace, site_of(rec, trace))] += size * n
    return out


def report(rec: Recording, top: int) -> dict[str, object]:
    per_mark = [(mark, live_by_site(rec, counts)) for mark, counts in rec.marks]
    base = per_mark[1][1] if len(per_mark) > 2 else per_mark[0][1]
    last = per_mark[-1][1]
    grew = sorted(set(last) | set(base), key=lambda s: base.get(s, 0) - last.get(s, 0))[:top]
    mib = 2 ** 20
    return {
        "marks_min": [mark for mark, _ in per_mark],
        "live_mib": [round(sum(sites.values()) / mib, 2) for _, sites in per_mark],
        "large_live_mib": [round(large_live(rec, counts) / mib, 2) for _, counts in rec.marks],
        "sites": [{"site": s, "live_mib": [round(sites.get(s, 0) / mib, 2) for _, sites in per_mark]} for s in grew],
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.heap_sites", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recording", type=Path, help="heaptrack's .zst (or uncompressed) data file")
    ap.add_argument("--marks", default="2,5,10,20", help="minutes since the attach at which to count, comma separated")
    ap.add_argument("--top", type=int, default=25, help="sites listed, those that grew most first")
    a = ap.parse_args(argv)
    marks = sorted(float(m) for m in a.marks.split(",") if m.strip())
    if a.recording.suffix == ".zst":
        with subprocess.Popen(["zstdcat", str(a.recording)], stdout=subprocess.PIPE, bufsize=1 << 20) as proc:
            assert proc.stdout is not None
            rec = read(proc.stdout, marks)
    else:
        with a.recording.open("rb") as f:
            rec = read(f, marks)
    print(json.dumps({"recording": str(a.recording), **report(rec, a.top)}, indent=1))


if __name__ == "__main__":
    main()
