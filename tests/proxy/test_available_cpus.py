"""proxy.workers.available_cpus: the affinity, capped by the cgroup v2 CPU quota rounded up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proxy import workers


@pytest.mark.parametrize(
    ("cpu_max", "want"),
    [("max 100000\n", None), ("150000 100000\n", 2), ("50000 100000\n", 1), ("100000 100000\n", 1), ("garbage", None)],
)
def test_quota_caps_the_affinity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_max: str, want: int | None) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    path = tmp_path / "cpu.max"
    path.write_text(cpu_max)
    monkeypatch.setattr(workers, "_CGROUP_CPU_MAX", path)
    assert workers.available_cpus() == (4 if want is None else want)


def test_no_cgroup_file_means_the_affinity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setattr(workers, "_CGROUP_CPU_MAX", tmp_path / "missing")
    assert workers.available_cpus() == 3
