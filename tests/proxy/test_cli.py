"""`partition-proxy serve` refuses a bad configuration with one line naming the field; its
listener sends no TLS session tickets."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from config.models import ListenConfig, TLSConfig
from hack.pki import CertificateAuthority
from proxy.cli import server_ssl_context

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


def test_the_listener_sends_no_session_tickets_that_no_kubernetes_client_resumes(tmp_path: Path) -> None:
    """TLS 1.3 session tickets cost the proxy 14 % of a kubelet's handshake (bench.tls_handshake)
    and client-go never resumes, so the listener's context sends none: a client that reads past
    the handshake holds no ticket."""
    ca = CertificateAuthority.create(tmp_path, "tickets-test-ca")
    crt, key = ca.issue_serving(tmp_path, "server", ["127.0.0.1"])
    context = server_ssl_context(ListenConfig(tls=TLSConfig(cert_file=crt, key_file=key, client_ca_file=ca.cert_file)))
    assert context is not None
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with context.wrap_socket(conn, server_side=True) as tls:
            tls.sendall(b"x")  # after the handshake: tickets, when sent, come before it
            tls.recv(1)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    client = ssl.create_default_context(cafile=str(ca.cert_file))
    with socket.create_connection(listener.getsockname()) as sock, client.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        assert tls.recv(1) == b"x"
        assert tls.version() == "TLSv1.3" and tls.session is not None
        assert not tls.session.has_ticket
        tls.sendall(b"y")
    server.join(timeout=10)
    listener.close()
