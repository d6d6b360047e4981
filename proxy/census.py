"""A census of the Python objects this process holds, by type, without tracing allocations.

tracemalloc names allocation sites but costs every allocation (at 1,000 kubelets it overloads a
replica); a census costs nothing until asked, then walks every object once. It answers "which
types grew" between two censuses, the question a slow rise of the C heap's bytes in use
(proxy.allocator.heap_usage) leaves open: pymalloc serves objects of up to 512 bytes from its own
mapped arenas, so the C heap grows only by larger objects (dict and list tables, long bytes and
str), which the census counts apart.

Asked through `/debug/memory?census` only when the process runs with CENSUS_ENV=1: a census
holds the event loop for about 2 microseconds per object (0.4-0.5 s for the soak's replica A,
~250,000 objects with 500 kubelets), and the debug endpoints answer without authentication.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

# environment variable: "1" lets /debug/memory?census run a census (module docstring)
CENSUS_ENV = "PARTITION_PROXY_CENSUS"
# bytes: pymalloc's largest block (SMALL_REQUEST_THRESHOLD, Objects/obmalloc.c); an object
# larger than this is allocated from the C heap and counts in its bytes in use
SMALL_OBJECT_BYTES = 512
# types listed, the largest first: enough to name what grew, small enough to read
TOP_TYPES = 40
# objects handed to one gc.get_referents call: bounds the list of their referents held at once
_REFERENT_BATCH = 10_000
_ATOMIC = (bytes, str, bytearray)


def census_enabled() -> bool:
    """Whether this process was started with CENSUS_ENV=1."""
    return os.environ.get(CENSUS_ENV) == "1"


def census(top: int = TOP_TYPES) -> dict[str, Any]:
    """Every object the garbage collector tracks (the frozen ones included: they are unfrozen
    for the walk and frozen again after it), plus the objects they refer to that it does not
    track (bytes, str, and dicts and tuples holding only such values), counted once each.

    Returns {"seconds": the census's own duration, "objects": objects counted, "bytes": their
    sys.getsizeof sum, "types": [{"type", "count", "bytes"}] the `top` largest by bytes,
    "large": the same for objects of more than SMALL_OBJECT_BYTES only (the C heap's share)}.
    Untracked objects of SMALL_OBJECT_BYTES or less (a dict key, a small int) are left out:
    they are shared too widely to count once without a set of every object's id."""
    started = time.monotonic()
    frozen = gc.get_freeze_count()
    if frozen:
        gc.unfreeze()
    try:
        tracked = gc.get_objects()
    finally:
        if frozen:
            gc.freeze()  # what loop_health froze stays frozen; objects born since are frozen with it
    counts: dict[type, list[int]] = {}  # type -> [count, bytes, large count, large bytes]

    def count(obj: object) -> None:
        size = sys.getsizeof(obj)
        row = counts.get(type(obj))
        if row is None:
            row = counts[type(obj)] = [0, 0, 0, 0]
        row[0] += 1
        row[1] += size
        if size > SMALL_OBJECT_BYTES:
            row[2] += 1
            row[3] += size

    for obj in tracked:
        count(obj)
    seen: set[int] = set()  # ids of the large untracked objects counted
    pending: list[Any] = tracked
    while pending:
        holders: list[Any] = []  # untracked dicts and tuples: their values are untracked too, count them next
        for start in range(0, len(pending), _REFERENT_BATCH):
            for ref in gc.get_referents(*pending[start:start + _REFERENT_BATCH]):
                kind = type(ref)
                if kind in _ATOMIC:
                    if len(ref) > SMALL_OBJECT_BYTES - 64 and id(ref) not in seen and sys.getsizeof(ref) > SMALL_OBJECT_BYTES:
                        seen.add(id(ref))
                        count(ref)
                elif (kind is dict or kind is tuple) and not gc.is_tracked(ref):
                    if sys.getsizeof(ref) > SMALL_OBJECT_BYTES:
                        if id(ref) in seen:
                            continue
                        seen.add(id(ref))
                        count(ref)
                    holders.append(ref)  # small ones are not counted, but may hold large bytes
        pending = holders
    del tracked, pending

    def rows(by: int) -> list[dict[str, Any]]:
        ranked = sorted(counts.items(), key=lambda item: -item[1][by + 1])[:top]
        return [{"type": f"{kind.__module__}.{kind.__qualname__}", "count": row[by], "bytes": row[by + 1]}
                for kind, row in ranked if row[by]]

    return {"seconds": round(time.monotonic() - started, 3), "objects": sum(r[0] for r in counts.values()),
            "bytes": sum(r[1] for r in counts.values()), "types": rows(0), "large": rows(2)}
