"""Session fixtures shared by every test package: the federation of real partitions with the
proxy in front (`kube`), and a per-test name suffix (`unique`). Helpers live in tests/federation.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests import rvscan
from tests.federation import TEST_CACHES, TEST_CONFIG, Kube, running_federation
from tests.goclients import rvcheck  # noqa: F401 (a session fixture: the client-go program)


def pytest_configure(config: pytest.Config) -> None:
    rvscan.install()


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """2 TPs x 2 RPs of real kube-apiservers and the proxy, once per test session."""
    with running_federation(tmp_path_factory.mktemp("federation"), caches=TEST_CACHES, extra=TEST_CONFIG) as kube:
        yield kube


@pytest.fixture
def unique() -> str:
    """A short suffix that keeps object names of one test apart from every other test's."""
    return uuid.uuid4().hex[:6]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Any resourceVersion through a proxy that breaks the invariant fails the run."""
    if rvscan.SCANNER.violations and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Report the resourceVersion scan and how many fuzz cases ran against the proxy."""
    from tests.integration.test_fuzz import STATS

    scan = rvscan.SCANNER
    if scan.bodies:
        terminalreporter.write_line(
            f"resourceVersion scan: {scan.bodies} bodies through the proxy, {scan.rvs} resourceVersions, "
            f"{len(scan.violations)} violations"
        )
    for violation in scan.violations[:20]:
        terminalreporter.write_line(f"  RV VIOLATION {violation}")

    if STATS["cases"]:
        terminalreporter.write_line(
            f"fuzz: {STATS['cases']} cases against the proxy (HTTP/1.1 and HTTP/2): {STATS['ok']} answered 2xx/3xx by the proxy, "
            f"{STATS['proxy_status']} errors as Status from the proxy, {STATS['upstream']} real partition answers; "
            f"proxy RSS growth at most {STATS.get('rss_growth_kib', 0)} KiB per run"
        )
