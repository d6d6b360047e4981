"""`partition-proxy serve` refuses a bad configuration with one line naming the field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).parent / "partition-proxy"
_TWO_PARTITIONS = ("partitions:\n- {name: tp1, role: tenant, kubeconfig: a}\n- {name: rp1, role: resource, kubeconfig: b}\n"
                   "system_partition: tp1\n")


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ("partitions: []\nsystem_partition: tp1\n", "partitions"),
        (
            "partitions:\n- {name: tp1, role: tenant, kubeconfig: a}\n- {name: rp1, role: rsrc, kubeconfig: b}\n"
            "system_partition: tp1\n",
            "partitions.1.role",
        ),
        (
            "partitions:\n- {name: tp1, role: tenant, kubeconfig: a}\n- {name: rp1, role: resource, kubeconfig: b}\n"
            "system_partition: rp1\n",
            "system_partition",
        ),
        ("listen: {port: 99999}\n", "listen.port"),
        ("{{{", "YAML"),
        # found by the checks past the file's own (`--check-config`, a child of a supervisor)
        (_TWO_PARTITIONS + "caches:\n- {name: p, resource: pods, role: tenant, label_selector: 'a in (b'}\n",
         "caches.0.label_selector"),
        (_TWO_PARTITIONS + "listen: {tls: {cert_file: /nonexistent.crt, key_file: /nonexistent.key}}\n", "listen.tls"),
    ],
)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_bad_config_fails_start_up_with_one_line_naming_the_field(tmp_path: Path, config: str, field: str, workers: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    done = subprocess.run([str(EXE), "serve", "--config", str(path), "--workers", workers], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert field in lines[0]
    assert "Traceback" not in done.stderr


def test_start_up_names_its_openssl_and_warns_below_the_wanted_series(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from proxy import cli

    caplog.set_level("INFO", logger="partition_proxy.cli")
    monkeypatch.setattr(cli.ssl, "OPENSSL_VERSION_INFO", (3, 5, 5, 0, 0))
    monkeypatch.setattr(cli.ssl, "OPENSSL_VERSION", "OpenSSL 3.5.5 27 Jan 2026")
    cli._log_tls_library()
    monkeypatch.setattr(cli.ssl, "OPENSSL_VERSION_INFO", (3, 0, 19, 0, 0))
    monkeypatch.setattr(cli.ssl, "OPENSSL_VERSION", "OpenSSL 3.0.19 27 Jan 2026")
    cli._log_tls_library()
    assert [(r.levelname, r.getMessage().split(":")[0]) for r in caplog.records] == [
        ("INFO", "TLS by OpenSSL 3.5.5 27 Jan 2026"), ("WARNING", "TLS by OpenSSL 3.0.19 27 Jan 2026")]


def test_the_supervisor_of_workers_does_not_import_the_proxy_it_supervises() -> None:
    """`serve --workers N`'s supervisor lives as long as the replica: importing proxy.cli must
    not load the proxy (proxy.app, its HTTP servers and event loop), ~55 MiB it never runs."""
    code = ("import sys, proxy.cli, proxy.workers; "
            "print(','.join(m for m in ('proxy.app', 'proxy.fronts.listener', 'aiohttp', 'uvloop') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.strip() == ""
