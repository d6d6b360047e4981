"""Running the client-go programs of hack/k8s/clients (built by hack/build-components.sh) from
tests: the `rvcheck` fixture, and starting, finishing and reaping a run that reports one JSON
document on stdout."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from hack.federation import DEFAULT_BIN_DIR
from tests.federation import require_binaries

RVCHECK = DEFAULT_BIN_DIR / "rvcheck"

Report = dict[str, Any]


@pytest.fixture(scope="session")
def rvcheck() -> Path:
    """The rvcheck binary; missing fails under REQUIRE_REAL_PARTITIONS=1, else skips."""
    require_binaries(RVCHECK.name)
    return RVCHECK


def start_rvcheck(binary: Path, args: Sequence[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([str(binary), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_rvcheck(proc: subprocess.Popen[str], label: str, *, timeout: float) -> Report:
    """Wait for a run and return its report; a run that could not run fails the test with the
    report's `fatal` and the end of its stderr."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"rvcheck ({label}) did not finish in {timeout} s; stderr:\n{tail_text(err)}")
    try:
        report: Report = json.loads(out)
    except ValueError:
        pytest.fail(f"rvcheck ({label}) exited {proc.returncode} without a JSON report; stderr:\n{tail_text(err)}")
    if proc.returncode != 0:
        pytest.fail(f"rvcheck ({label}) could not run (exit {proc.returncode}): {report.get('fatal')}\n{tail_text(err)}")
    return report


def run_rvcheck(binary: Path, args: Sequence[str], label: str, *, timeout: float) -> Report:
    proc = start_rvcheck(binary, args)
    try:
        return finish_rvcheck(proc, label, timeout=timeout)
    finally:
        reap_rvcheck(proc)


def reap_rvcheck(proc: subprocess.Popen[str]) -> None:
    """Never leave a run behind (a failed assertion between start and finish)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def tail_text(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])
