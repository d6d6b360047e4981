"""`PartitionClient`: everything the proxy does to reach one partition.

Owns, per partition: the aiohttp session (one per partition), the proxy's own
credential (client certificate and CA, or bearer token, from the partition's kubeconfig), its
endpoints with failover (HA kube-apiservers), the circuit breaker, the timeouts of each request
class, and the conversion of transport failures into the proxy's own errors
(`proxy.clients.errors`). No other module touches aiohttp's client or the breaker (an
import-linter contract in pyproject.toml says so).

Every call is an async context manager that records its outcome with the breaker itself:

    async with client.request("GET", path, query=q, headers=h, identity=who) as answer:
        answer.status, answer.headers, await answer.read() / async for chunk in answer.chunks()

Entering raises `PartitionMarkedDown` (breaker open), `PartitionUnreachable` or
`PartitionTimedOut` (after recording the failure); the answer's headers arriving records a
success. A connection that cannot be made moves to the next endpoint at once, and a request
whose body can be sent again (bytes, or none) is tried there too: nothing was sent. Reading the
body raises `StreamBroken` (mid-stream failures are not the partition failing: its breaker is
not touched).

Request classes and their timeouts (seconds, `upstream.*` in the config):
- REQUEST: `request_timeout_seconds` in total;
- WATCH: `request_timeout_seconds` until the answer's headers, then no total: the stream lives
  as long as its client keeps it, and `watch_inactivity_seconds` without a byte breaks it
  (kube-apiserver sends a bookmark about once a minute to a watch that asked for them). A dead
  peer of a stream that did not ask for bookmarks is found by TCP keepalive (below).
"""

from __future__ import annotations

import asyncio
import enum
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import aiohttp
import orjson
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from config.models import FailureConfig, PartitionConfig, PartitionRole, UpstreamConfig
from proxy.clients.breaker import CircuitBreaker, Refused
from proxy.clients.credentials import Credentials, load_credentials
from proxy.clients.errors import (
    PartitionMarkedDown,
    PartitionTimedOut,
    PartitionUnreachable,
    StreamBroken,
    api_error,
)
from proxy.identity import Identity, add_impersonation

# What counts as the partition failing: it could not be reached, broke the connection before
# answering, or did not answer within the deadline. Any HTTP answer, even a 5xx, means it is up.
_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)

# TCP keepalive of every upstream connection: a peer that vanished without a reset (host down,
# network cut) is noticed after IDLE + INTERVAL x COUNT seconds even on a silent watch.
# seconds idle before the first probe; 30 s is well under kube-apiserver's 60 s bookmark period.
_KEEPALIVE_IDLE = 30
# seconds between probes, and probes without an answer before the connection is dropped.
_KEEPALIVE_INTERVAL = 10
_KEEPALIVE_COUNT = 3


class RequestClass(enum.Enum):
    REQUEST = "request"  # answered whole: a total deadline
    WATCH = "watch"  # a stream: a deadline for its headers, then an inactivity timeout


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds per request class (see the module docstring)."""

    connect: float
    request: float
    watch_inactivity: float

    @classmethod
    def from_config(cls, config: UpstreamConfig) -> Timeouts:
        return cls(
            connect=config.connect_timeout_seconds,
            request=config.request_timeout_seconds,
            watch_inactivity=config.watch_inactivity_seconds,
        )


Body = bytes | AsyncIterator[bytes] | None


class Whole(NamedTuple):
    """An answer read whole (`PartitionClient.read_whole`)."""

    status: int
    headers: CIMultiDict[str]
    body: bytes


class UpstreamResponse:
    """A partition's answer: `status`, `headers`, and the body, read whole (`read`) or as it
    arrives (`chunks`). Closed by the `request()` block that made it."""

    __slots__ = ("partition", "status", "headers", "_response", "_inactivity")

    def __init__(self, partition: str, response: aiohttp.ClientResponse, inactivity: float | None) -> None:
        self.partition = partition
        self.status = response.status
        self.headers: CIMultiDictProxy[str] = response.headers
        self._response = response
        self._inactivity = inactivity

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "")

    async def read(self) -> bytes:
        """The whole body. Raises StreamBroken."""
        try:
            return await self._response.read()
        except _TRANSPORT_ERRORS as exc:
            raise StreamBroken(self.partition, f"body broke: {type(exc).__name__}") from None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, in the pieces the transport delivers. Ends at the end of the
        body; raises StreamBroken when it breaks or (a watch) stays silent past its inactivity
        timeout."""
        content = self._response.content
        while True:
            try:
                if self._inactivity is None:
                    chunk = await content.readany()
                else:
                    async with asyncio.timeout(self._inactivity):
                        chunk = await content.readany()
            except TimeoutError:
                raise StreamBroken(self.partition, f"no byte for {self._inactivity:g} s") from None
            except _TRANSPORT_ERRORS as exc:
                raise StreamBroken(self.partition, f"stream broke: {type(exc).__name__}") from None
            if not chunk:
                return
            yield chunk

    async def json(self) -> Any:
        """The body decoded as JSON; a non-2xx answer raises its APIError. Raises StreamBroken,
        APIError, ValueError (not JSON)."""
        raw = await self.read()
        if self.status >= 300:
            raise api_error(self.partition, self.status, raw)
        return orjson.loads(raw)

    def close(self) -> None:
        """Drop the connection (a stream the caller stops reading early)."""
        self._response.close()


class PartitionClient:
    """See the module docstring. Built by `open_partition` (or by tests with a session and
    credentials of their own)."""

    def __init__(
        self,
        *,
        name: str,
        role: PartitionRole,
        session: aiohttp.ClientSession,
        credentials: Credentials,
        timeouts: Timeouts,
        breaker: CircuitBreaker,
    ) -> None:
        self.name = name
        self.role = role
        self.endpoints: tuple[URL, ...] = credentials.endpoints
        self.breaker = breaker
        self._session = session
        self._auth = credentials.auth_header
        self._timeouts = timeouts
        self._current = 0
        self._request_timeout = aiohttp.ClientTimeout(total=timeouts.request, sock_connect=timeouts.connect)
        # A watch's total time is its client's to choose; its headers come within the request
        # deadline (sock_read bounds each read until then; the stream's reads are bounded by
        # the inactivity timeout in UpstreamResponse.chunks).
        self._watch_timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect, sock_read=timeouts.request)

    @property
    def base_url(self) -> URL:
        return self.endpoints[self._current]

    @property
    def is_marked_down(self) -> bool:
        """Its breaker is open: calls fail at once with PartitionMarkedDown."""
        return self.breaker.is_open

    @property
    def health(self) -> str:
        """`up`, `marked down` (breaker open) or `recovering` (half-open: the next call is the
        trial)."""
        return {"closed": "up", "open": "marked down", "half-open": "recovering"}[self.breaker.state]

    def retry_after(self) -> int:
        return self.breaker.retry_after()

    def url(self, path: str, query: str = "") -> URL:
        """The URL of a path and query exactly as given (already percent-encoded)."""
        text = str(self.base_url).rstrip("/") + path
        return URL(text + "?" + query if query else text, encoded=True)

    def _rotate(self) -> None:
        """Use the next endpoint from now on (plain def: atomic)."""
        self._current = (self._current + 1) % len(self.endpoints)

    def headers(self, base: CIMultiDict[str] | dict[str, str] | None = None, identity: Identity | None = None) -> CIMultiDict[str]:
        """`base` plus the proxy's own credential and, for a client's request, its identity as
        impersonation headers (`base` is already stripped of the client's identity headers)."""
        headers: CIMultiDict[str] = CIMultiDict(base or ())
        if self._auth:
            headers["Authorization"] = self._auth
        if identity is not None:
            add_impersonation(headers, identity)
        return headers

    @asynccontextmanager
    async def request(
        self,
        method: str,
        path: str,
        *,
        query: str = "",
        headers: CIMultiDict[str] | dict[str, str] | None = None,
        identity: Identity | None = None,
        body: Body = None,
        kind: RequestClass = RequestClass.REQUEST,
    ) -> AsyncIterator[UpstreamResponse]:
        """Send one request; yield its answer once the headers arrived (see the module
        docstring). `path` and `query` are sent exactly as given (percent-encoded). A body
        without Content-Type goes without one (aiohttp would add application/octet-stream,
        which kube-apiserver refuses with 415). Raises PartitionMarkedDown,
        PartitionUnreachable, PartitionTimedOut."""
        sent = self.headers(headers, identity)
        timeout = self._watch_timeout if kind is RequestClass.WATCH else self._request_timeout
        replayable = body is None or isinstance(body, bytes)
        attempts = len(self.endpoints)
        while True:
            url = self.url(path, query)
            try:
                with self.breaker.attempt(_TRANSPORT_ERRORS):
                    response = await self._session.request(
                        method, url, headers=sent, data=body, timeout=timeout, allow_redirects=False,
                        skip_auto_headers=("Content-Type",),
                    )
                break
            except Refused:
                raise PartitionMarkedDown(
                    self.name, "marked down after repeated failures", self.retry_after(), self.breaker.remaining()
                ) from None
            except aiohttp.ClientConnectorError as exc:
                # Nothing was sent: the next endpoint may take the request, even a mutating one.
                self._rotate()
                attempts -= 1
                if attempts <= 0 or not replayable:
                    raise PartitionUnreachable(self.name, type(exc).__name__, self.retry_after()) from None
            except asyncio.TimeoutError:
                self._rotate()
                raise PartitionTimedOut(self.name, "no answer within its deadline", self.retry_after()) from None
            except _TRANSPORT_ERRORS as exc:
                self._rotate()
                raise PartitionUnreachable(self.name, type(exc).__name__, self.retry_after()) from None
        answer = UpstreamResponse(self.name, response, self._timeouts.watch_inactivity if kind is RequestClass.WATCH else None)
        try:
            yield answer
        except BaseException:
            response.close()
            raise
        finally:
            response.release()

    async def read_whole(
        self, method: str, path: str, *, query: str = "", headers: CIMultiDict[str] | dict[str, str] | None = None,
        identity: Identity | None = None, body: bytes | None = None,
    ) -> Whole:
        """One request whose answer is read whole (a client's request the proxy must look at
        before answering: several partitions' answers merged or compared). Raises as `request`,
        and StreamBroken."""
        async with self.request(method, path, query=query, headers=headers, identity=identity, body=body) as answer:
            return Whole(answer.status, answer.headers.copy(), await answer.read())

    async def get_json(self, path: str, query: str = "", *, headers: dict[str, str] | None = None) -> Any:
        """GET with the proxy's own credential; the decoded JSON answer. Raises
        PartitionUnavailable, StreamBroken, APIError (non-2xx), ValueError (not JSON)."""
        async with self.request("GET", path, query=query, headers={"Accept": "application/json", **(headers or {})}) as answer:
            return await answer.json()

    async def send_json(self, method: str, path: str, doc: Any) -> Any:
        """POST/PUT a JSON document with the proxy's own credential; the decoded answer. Raises
        as `get_json`."""
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        async with self.request(method, path, headers=headers, body=orjson.dumps(doc)) as answer:
            return await answer.json()

    async def close(self) -> None:
        await self._session.close()


def _keepalive_socket(addr_info: Any) -> socket.socket:
    """aiohttp's socket factory with TCP keepalive on (see _KEEPALIVE_*)."""
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", _KEEPALIVE_IDLE), ("TCP_KEEPINTVL", _KEEPALIVE_INTERVAL), ("TCP_KEEPCNT", _KEEPALIVE_COUNT)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
    return sock


def new_session(ssl_context: ssl.SSLContext | bool) -> aiohttp.ClientSession:
    """A session for one partition: no connection cap (each downstream watch that is not served
    from a cache holds one upstream connection; in-flight limits bound them), bodies passed
    on as they come (no decompression), no headers of aiohttp's own, and no cookie jar: the
    session serves every client, so a cookie set in one client's answer (by a load balancer in
    front of HA kube-apiservers, say) must not ride along with the next client's requests."""
    connector = aiohttp.TCPConnector(ssl=ssl_context, limit=0, enable_cleanup_closed=True, socket_factory=_keepalive_socket)
    return aiohttp.ClientSession(connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent", "Accept-Encoding"),
                                 cookie_jar=aiohttp.DummyCookieJar())


async def open_partition(
    partition: PartitionConfig,
    upstream: UpstreamConfig,
    failure: FailureConfig,
    *,
    clock: Callable[[], float] | None = None,
) -> PartitionClient:
    """The client of a configured partition: its kubeconfig loaded, its session open. Raises
    OSError or ValueError (from the kubeconfig loader) when the kubeconfig is unusable."""
    credentials = await load_credentials(partition.kubeconfig, extra_servers=partition.extra_servers)
    breaker = CircuitBreaker(failure.breaker_failures, failure.breaker_open_seconds)
    if clock is not None:
        breaker.clock = clock
    return PartitionClient(
        name=partition.name,
        role=partition.role,
        session=new_session(credentials.ssl_context),
        credentials=credentials,
        timeouts=Timeouts.from_config(upstream),
        breaker=breaker,
    )
