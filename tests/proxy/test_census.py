"""proxy.census: a census finds what the process holds, by type, including bytes held only by
dicts and tuples the garbage collector does not track, counts each object once, and leaves the
frozen objects frozen. Each case builds its holdings in a fresh interpreter so the counts are
its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_PROBE = """
import gc, json, os, sys
from proxy.census import census
class Body:
    pass
held = {f"pod-{i}": {"body": os.urandom(2000), "rv": i} for i in range(3000)}  # dicts of atomics: untracked
shared = os.urandom(4000)
pairs = [(i, shared) for i in range(1000)]  # one large bytes referred to 1,000 times: counted once
bodies = [Body() for _ in range(5000)]
gc.collect()
if sys.argv[1] == "frozen":
    gc.freeze()
before = gc.get_freeze_count()
result = census()
print(json.dumps({"census": result, "frozen_before": before, "frozen_after": gc.get_freeze_count()}))
"""


def _census(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    return json.loads(out.stdout)


def _row(rows: list[dict], kind: str) -> dict:
    return next(row for row in rows if row["type"] == kind)


def test_a_census_counts_large_bytes_behind_untracked_dicts_once_each() -> None:
    for mode in ("plain", "frozen"):  # frozen objects are found too
        doc = _census(mode)
        large_bytes = _row(doc["census"]["large"], "builtins.bytes")
        assert 3001 <= large_bytes["count"] < 3100  # 3,000 bodies and the shared one (plus a few of the interpreter's)
        assert 3000 * 2000 + 4000 <= large_bytes["bytes"] < 3000 * 2100 + 4100 + 100 * 4096
        assert _row(doc["census"]["types"], "__main__.Body")["count"] == 5000
        assert doc["frozen_after"] >= doc["frozen_before"]
        if mode == "frozen":
            assert doc["frozen_before"] > 0 and doc["frozen_after"] > 0
        sizes = [row["bytes"] for row in doc["census"]["types"]]
        assert sizes == sorted(sizes, reverse=True)
