"""Session fixtures shared by every test package: the federation of real partitions with the
proxy in front (`kube`), and a per-test name suffix (`unique`). Helpers live in tests/federation.py.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from hack.federation import DEFAULT_BIN_DIR, PROXY_ADMINS_GROUP, Federation, find_kubectl
from hack.proxy_process import ProxyProcess
from tests.federation import TEST_CACHES, TEST_CONFIG, Kube


def _binaries_present() -> bool:
    return all((DEFAULT_BIN_DIR / b).exists() for b in ("kube-apiserver", "etcd"))


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    if not _binaries_present():
        message = f"real kube-apiserver/etcd missing in {DEFAULT_BIN_DIR}: run `make test` (hack/build-components.sh)"
        if os.environ.get("REQUIRE_REAL_PARTITIONS"):
            pytest.fail(message)
        pytest.skip(message)  # REQUIRE_REAL_PARTITIONS unset: a developer machine without Go
    root = tmp_path_factory.mktemp("federation")
    fed = Federation(root)
    fed.start()
    proxy = None
    try:
        proxy = ProxyProcess(fed, root / "proxy", caches=TEST_CACHES, extra=TEST_CONFIG).start()
        admin = fed.issue_client_kubeconfig("admin-through-proxy", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxy.server)
        yield Kube(fed=fed, proxy=proxy, kubectl_path=find_kubectl(), admin=admin)
    finally:
        if proxy is not None:
            proxy.stop()
        fed.stop()


@pytest.fixture
def unique() -> str:
    """A short suffix that keeps object names of one test apart from every other test's."""
    return uuid.uuid4().hex[:6]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Report how many fuzz cases ran against the proxy (tests/integration/test_fuzz.py)."""
    from tests.integration.test_fuzz import STATS

    if STATS["cases"]:
        terminalreporter.write_line(
            f"fuzz: {STATS['cases']} cases against the proxy: {STATS['ok']} answered 2xx/3xx by the proxy, "
            f"{STATS['proxy_status']} errors as Status from the proxy, {STATS['upstream']} real partition answers; "
            f"proxy RSS growth {STATS.get('rss_growth_kib', 0)} KiB"
        )
