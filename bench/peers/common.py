"""What both peers share: the command line, the TLS contexts, the route and the identity."""

from __future__ import annotations

import argparse
import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

# Headers that never cross a forwarder (RFC 9110 7.6.1 hop-by-hop, the framing it recomputes,
# and the identity headers it writes itself).
DROP_REQUEST = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
                          "host", "content-length", "authorization"})
DROP_RESPONSE = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
                           "content-length"})


def parse_args(description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cert", required=True, help="serving certificate")
    ap.add_argument("--key", required=True)
    ap.add_argument("--client-ca", required=True, help="CA of the client certificates (required of every client)")
    ap.add_argument("--upstream", action="append", required=True, help="tp=URL and rp=URL: the tenant and resource partition")
    ap.add_argument("--upstream-ca", required=True)
    ap.add_argument("--upstream-cert", required=True, help="the forwarder's own client certificate at the partitions")
    ap.add_argument("--upstream-key", required=True)
    args = ap.parse_args()
    args.upstream = dict(u.split("=", 1) for u in args.upstream)
    return args


def server_ssl(args: argparse.Namespace) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=args.client_ca)
    ctx.load_cert_chain(args.cert, args.key)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def upstream_ssl(args: argparse.Namespace) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=args.upstream_ca)
    ctx.load_cert_chain(args.upstream_cert, args.upstream_key)
    return ctx


def partition_of(path: str) -> str:
    """`rp` for node Leases, `tp` for everything else."""
    return "rp" if "/leases/" in path else "tp"


def impersonation(peercert: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Impersonate-User (the certificate's CN) and one Impersonate-Group per O."""
    user, groups = "", []
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                user = value
            elif key == "organizationName":
                groups.append(value)
    return [("Impersonate-User", user)] + [("Impersonate-Group", g) for g in groups]


async def serve(handle: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]], args: argparse.Namespace) -> None:
    """Serve `handle` with aiohttp's low-level server on 127.0.0.1:`args.port` (TLS, the port
    shared with the other processes of the peer), forever."""
    server = web.Server(handle, access_log=None)
    await asyncio.get_running_loop().create_server(server, "127.0.0.1", args.port, ssl=server_ssl(args), reuse_port=True)
    await asyncio.Event().wait()
