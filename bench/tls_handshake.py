"""CPU per TLS handshake of the proxy's listener, by OpenSSL build: what a reconnect storm costs
per connection, and why local proxies run the OpenSSL of the image (hack/openssl.py).

The server is the proxy's own: `proxy.cli.server_ssl_context` (its serving certificate, client
certificates verified against the client CA, ALPN h2 and http/1.1) on uvloop, a protocol that
reads the peer certificate as `proxy.authn` does and closes. It runs in a child process pinned
to CPU 0, with either this machine's OpenSSL (`system`) or the one hack/build-openssl.sh built
(`built`, through `hack.openssl.proxy_env`); a client process pinned to CPU 1 makes
`--handshakes` TLS 1.3 connections one after the other, with a client certificate (as a
kubelet) or without (as a health probe). One more case gives the proxy's context OpenSSL's
default of 2 TLS 1.3 session tickets per handshake again (`proxy.cli.server_ssl_context` sends
none since 2026-11-30). The figure is the server process's CPU (user +
system, from getrusage) per handshake in milliseconds, the median of `--rounds` rounds; the
cases alternate within each round.

Run: `python -m bench.tls_handshake [--handshakes 1500] [--rounds 3]`. Needs
`bash hack/build-openssl.sh`. One JSON document on stdout and .local/bench/tls_handshake.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import ssl
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import WORK_DIR, emit, host_info, log
from hack.openssl import proxy_env
from hack.pki import CertificateAuthority

NAME = "tls_handshake"
SERVER_CPU, CLIENT_CPU = 0, 1
# (library, client certificate, TLS 1.3 session tickets per handshake: None, the proxy's context as
# it is; 2, OpenSSL's default, which the proxy's context had before 2026-11-30)
CASES = (("system", True, None), ("built", True, None), ("built", True, 2), ("system", False, None), ("built", False, None))


def _serve(pki: Path, handshakes: int, tickets: int | None) -> None:
    """The child: serve `handshakes` TLS connections, then print the CPU they cost as JSON.
    `tickets`: session tickets per handshake instead of the context's own setting."""
    import uvloop

    from config.models import ListenConfig, TLSConfig
    from proxy.cli import server_ssl_context

    os.sched_setaffinity(0, {SERVER_CPU})
    tls = TLSConfig(cert_file=pki / "serving.crt", key_file=pki / "serving.key", client_ca_file=pki / "ca.crt")
    context = server_ssl_context(ListenConfig(tls=tls))
    assert context is not None
    if tickets is not None:
        context.num_tickets = tickets
    done = 0

    class Handshake(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            nonlocal done
            transport.get_extra_info("peercert")  # what proxy.authn reads
            transport.close()
            done += 1

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Handshake, "127.0.0.1", 0, ssl=context, backlog=1024)
        print(server.sockets[0].getsockname()[1], flush=True)
        start = resource.getrusage(resource.RUSAGE_SELF)
        while done < handshakes:
            await asyncio.sleep(0.02)
        end = resource.getrusage(resource.RUSAGE_SELF)
        cpu = end.ru_utime - start.ru_utime + end.ru_stime - start.ru_stime
        print(json.dumps({"openssl": ssl.OPENSSL_VERSION, "handshakes": done, "cpu_ms_per_handshake": round(cpu / done * 1e3, 3)}), flush=True)

    uvloop.run(main())


def _connect(port: int, pki: Path, handshakes: int, client_certificate: bool) -> None:
    """`handshakes` TLS connections to `port`, one after the other (pinned to CLIENT_CPU)."""
    os.sched_setaffinity(0, {CLIENT_CPU})
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.set_alpn_protocols(["h2", "http/1.1"])
    if client_certificate:
        context.load_cert_chain(pki / "kubelet.crt", pki / "kubelet.key")
    for _ in range(handshakes):
        with socket.create_connection(("127.0.0.1", port)) as sock, context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            try:
                tls.recv(1)  # the server's close (TLS 1.3: after its session tickets)
            except OSError:
                pass


def one_case(pki: Path, library: str, client_certificate: bool, tickets: int | None, handshakes: int) -> dict[str, Any]:
    if library == "built":
        env = {**os.environ, **proxy_env()}
    else:  # the machine's own OpenSSL, whatever library path the caller runs with
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    argv = [sys.executable, "-m", "bench.tls_handshake", "--serve", str(pki), "--handshakes", str(handshakes)]
    if tickets is not None:
        argv += ["--tickets", str(tickets)]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        _connect(port, pki, handshakes, client_certificate)
        result: dict[str, Any] = json.loads(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--handshakes", type=int, default=1500, help="per case and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # the child
    ap.add_argument("--tickets", type=int, help=argparse.SUPPRESS)  # the child's session tickets
    args = ap.parse_args()
    if args.serve is not None:
        _serve(args.serve, args.handshakes, args.tickets)
        return
    pki = WORK_DIR / NAME
    pki.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority.create(pki, "bench-ca")
    ca.issue_serving(pki, "serving", ["127.0.0.1"])
    ca.issue_client(pki, "kubelet", "system:node:bench-node", ["system:nodes"])
    runs: dict[tuple[str, bool, int | None], list[float]] = {case: [] for case in CASES}
    versions: dict[str, str] = {}
    for r in range(args.rounds):
        for library, client_certificate, tickets in CASES:
            result = one_case(pki, library, client_certificate, tickets, args.handshakes)
            versions[library] = result["openssl"]
            runs[(library, client_certificate, tickets)].append(result["cpu_ms_per_handshake"])
            log(f"round {r + 1}: {library} ({result['openssl']}), client certificate {client_certificate}, "
                f"session tickets {'as the proxy sends them' if tickets is None else tickets}: "
                f"{result['cpu_ms_per_handshake']} ms per handshake")
    cases = [{"library": library, "openssl": versions[library], "client_certificate": cert,
              "session_tickets": "proxy" if tickets is None else tickets,
              "cpu_ms_per_handshake": statistics.median(runs[(library, cert, tickets)]), "rounds_ms": runs[(library, cert, tickets)]}
             for library, cert, tickets in CASES]
    proxy_cert = {(c["library"], c["session_tickets"]): c["cpu_ms_per_handshake"] for c in cases if c["client_certificate"]}
    emit(NAME, {"benchmark": NAME, "host": host_info(), "handshakes_per_case": args.handshakes, "rounds": args.rounds,
                "cases": cases,
                "system_over_built_with_client_certificate": round(proxy_cert[("system", "proxy")] / proxy_cert[("built", "proxy")], 2),
                "two_tickets_over_proxy_with_client_certificate": round(proxy_cert[("built", 2)] / proxy_cert[("built", "proxy")], 2)})


if __name__ == "__main__":
    main()
