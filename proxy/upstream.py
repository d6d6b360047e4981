"""Upstream sessions: one aiohttp ClientSession per partition (DESIGN §9, STYLE §6).

Credentials and endpoints come from each partition's kubeconfig, loaded with
kubernetes-asyncio's kubeconfig loader (client certificate, bearer token, CA, TLS server name).
Timeouts are per request class: a non-watch request gets `request_timeout_seconds` in total;
a watch gets no total timeout at all (it lives for as long as the client keeps it) and is ended
by the partition or the client.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import load_kube_config
from yarl import URL

from config.models import FailureConfig, PartitionConfig, PartitionRole, UpstreamConfig
from proxy.health import CircuitBreaker


@dataclass(slots=True)
class Upstream:
    """A partition's endpoints and the session that reaches them. Requests go to the current
    endpoint; `rotate()` moves to the next one when it cannot be reached (HA apiservers)."""

    name: str
    role: PartitionRole
    endpoints: tuple[URL, ...]
    session: aiohttp.ClientSession
    auth_header: str | None
    request_timeout: aiohttp.ClientTimeout
    watch_timeout: aiohttp.ClientTimeout
    breaker: CircuitBreaker
    current: int = 0

    @property
    def base_url(self) -> URL:
        return self.endpoints[self.current]

    def rotate(self) -> None:
        """Use the next endpoint from now on (plain def: atomic)."""
        self.current = (self.current + 1) % len(self.endpoints)

    def url(self, path: str, query_string: str = "") -> URL:
        """The upstream URL of a path and query exactly as given (already percent-encoded)."""
        text = str(self.base_url).rstrip("/") + path
        return URL(text + "?" + query_string if query_string else text, encoded=True)


class ReviewError(Exception):
    """A review request (TokenReview, SubjectAccessReview) got no usable answer."""


async def post_review(upstream: Upstream, path: str, review: dict[str, Any]) -> dict[str, Any]:
    """POST a review object with the proxy's own credential; return its `status`. Raises
    ReviewError (with a one-line reason) when the partition cannot be asked or refuses."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if upstream.auth_header:
        headers["Authorization"] = upstream.auth_header
    try:
        async with upstream.session.post(
            upstream.url(path), data=orjson.dumps(review), headers=headers, timeout=upstream.request_timeout
        ) as resp:
            if resp.status not in (200, 201):
                raise ReviewError(f"{review['kind']} on {upstream.name} answered {resp.status}")
            status = orjson.loads(await resp.read()).get("status") or {}
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
        raise ReviewError(f"{review['kind']} on {upstream.name} failed: {type(exc).__name__}") from None
    return status if isinstance(status, dict) else {}


async def _load_kubeconfig(path: Path) -> Configuration:
    cfg = Configuration()
    await load_kube_config(config_file=str(path), client_configuration=cfg, persist_config=False)
    return cfg


def _ssl_context(cfg: Configuration) -> ssl.SSLContext | bool:
    if not (cfg.host or "").startswith("https"):
        return False
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


async def open_upstream(partition: PartitionConfig, timeouts: UpstreamConfig, failure: FailureConfig) -> Upstream:
    """Load a partition's kubeconfig and open its session. Raises OSError or ValueError (from
    the kubeconfig loader) when the kubeconfig is unusable."""
    cfg = await _load_kubeconfig(partition.kubeconfig)
    connector = aiohttp.TCPConnector(
        ssl=_ssl_context(cfg),
        # No cap on connections: every downstream watch holds one upstream connection until
        # the watch caches multiplex them. Limits per class come with overload protection.
        limit=0,
        enable_cleanup_closed=True,
    )
    session = aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
    )
    auth = cfg.api_key.get("authorization") if cfg.api_key else None
    if auth and not auth.lower().startswith("bearer "):
        auth = "Bearer " + auth
    return Upstream(
        name=partition.name,
        role=partition.role,
        endpoints=(URL(cfg.host or ""), *(URL(u) for u in partition.extra_servers)),
        session=session,
        auth_header=auth,
        request_timeout=aiohttp.ClientTimeout(
            total=timeouts.request_timeout_seconds, sock_connect=timeouts.connect_timeout_seconds
        ),
        watch_timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect_timeout_seconds),
        breaker=CircuitBreaker(partition.name, failure.breaker_failures, failure.breaker_open_seconds),
    )
