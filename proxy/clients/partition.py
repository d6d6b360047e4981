"""`PartitionClient`: everything the proxy does to reach one partition.

Owns, per partition: the transport to each of its endpoints (`proxy.clients.transport`:
persistent connections, a request in one write, llhttp parsing the answer), the proxy's own
credential (client certificate and CA, or bearer token, from the partition's kubeconfig), its
endpoints with failover (HA kube-apiservers), the circuit breaker, the timeouts of each request
class, and the conversion of transport failures into the proxy's own errors
(`proxy.clients.errors`). Every call to a partition goes through here: forwards, union lists
and watches, reflectors, reviews, the resourceVersion table. No other module touches the
transport or the breaker (import-linter contracts in pyproject.toml say so).

A request's head is written per call from parts made once: per endpoint the request line's end,
Host and the proxy's credential; per identity its impersonation header block
(`Identity.impersonation`).

Every call is an async context manager that records its outcome with the breaker itself:

    async with client.request("GET", path, query=q, headers=h, identity=who) as answer:
        answer.status, answer.headers, await answer.read() / async for chunk in answer.chunks()

Entering raises `PartitionMarkedDown` (breaker open), `PartitionUnreachable` or
`PartitionTimedOut` (after recording the failure); the answer's headers arriving records a
success. The call that makes a marked-down partition's half-open trial, or the next call after
a connection was refused or broke, or the partition closed one while it waited in the pool or
carried a watch (`CircuitBreaker.suspect`: the breaker need not have opened),
first asks the endpoint's `/readyz`, as a load balancer in front of kube-apiservers gates them on
their readiness probe: a restarted kube-apiserver listens before it is ready and, until its RBAC
informers have synced, answers 403 to whatever the proxy impersonates
(kubernetes/kubernetes#101422 gave that denial its reason, "informers not synced"); so it stays
marked down until `/readyz` passes, asked again every READINESS_PERIOD_SECONDS, and meanwhile
other calls get `PartitionMarkedDown`. A connection that cannot be made moves to the next endpoint at once, and a request
whose body can be sent again (bytes, or none) is tried there too: nothing was sent. A GET
whose reused connection broke before any answer is sent once more on a new connection. Reading the
body raises `StreamBroken` (mid-stream failures are not the partition failing: its breaker is
not touched).

Request classes and their timeouts (seconds, `upstream.*` in the config):
- REQUEST: `request_timeout_seconds` in total;
- WATCH: `request_timeout_seconds` until the answer's headers, then no total: the stream lives
  as long as its client keeps it, and `watch_inactivity_seconds` without a byte breaks it
  (kube-apiserver sends a bookmark about once a minute to a watch that asked for them). A dead
  peer of a stream that did not ask for bookmarks is found by TCP keepalive
  (`proxy.clients.transport`).
"""

from __future__ import annotations

import enum
import logging
import re
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NamedTuple

import orjson
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from config.models import FailureConfig, PartitionConfig, PartitionRole, UpstreamConfig
from proxy.clients.breaker import CircuitBreaker
from proxy.clients.credentials import Credentials, load_credentials
from proxy.clients.errors import (
    PartitionMarkedDown,
    PartitionTimedOut,
    PartitionUnreachable,
    StreamBroken,
    api_error,
)
from proxy.clients.transport import ConnectFailed, Endpoint, Exchange, TimedOut, connections_alive, largest_reads
from proxy.identity import Identity

log = logging.getLogger("partition_proxy.partition")

# What counts as the partition failing: it could not be reached, broke the connection before
# answering, or did not answer within the deadline (the transport's errors are OSErrors, and so
# is TimeoutError). Any HTTP answer, even a 5xx, means it is up.
_TRANSPORT_ERRORS = (OSError,)
# Methods whose request may be sent again on a new connection when a reused one broke before
# any answer (RFC 9110 9.2.2 safe methods; net/http's `isReplayable` also requires no body).
_REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
# A request line or header that would split the request (a line break) or its target (white
# space): refused before anything is sent (the fronts' parsers refuse them already; this is the
# transport's own guard, as Go's net/http `validHeaderFieldValue`).
_SPLITS_TARGET = re.compile(r"[\s]")
# How often the transport checks its busy connections' deadlines (proxy.clients.transport): a
# tenth of the shortest timeout, so a deadline fires at most 10 % late; seconds, between 10 ms
# (tests with sub-second timeouts) and 1 s (the defaults: 60 s requests, a watch silent for
# minutes).
_TICKS_PER_TIMEOUT = 10
_MIN_TICK = 0.01
_MAX_TICK = 1.0
# The readiness probe of a half-open trial (see the module docstring): kubeadm's readinessProbe
# of kube-apiserver (cmd/kubeadm/app/util/staticpod/utils.go `ReadinessProbe`: /readyz, a 15 s
# timeout, every 1 s). Seconds; the timeout is also capped by the request timeout.
READYZ_PATH = "/readyz"
READINESS_TIMEOUT_SECONDS = 15.0
READINESS_PERIOD_SECONDS = 1.0
# Headers the transport writes itself (framing and the proxy's own credential): never copied
# from what a caller passes.
_TRANSPORT_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "authorization"})


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


class InvalidRequest(ValueError):
    """A path, query or header value that would split the request on the wire (a line break, or
    white space in the target): nothing was sent. The caller answers 400."""


class Whole(NamedTuple):
    """An answer read whole (`PartitionClient.read_whole`)."""

    status: int
    headers: CIMultiDict[str]
    body: bytes


class UpstreamResponse:
    """A partition's answer: `status`, `headers` (or `raw_headers`, the fields as received), and
    the body, read whole (`read`) or as it arrives (`chunks`). Closed by the `request()` block
    that made it."""

    __slots__ = ("partition", "status", "raw_headers", "_headers", "_content_type", "_exchange")

    def __init__(self, partition: str, exchange: Exchange) -> None:
        self.partition = partition
        self.status = exchange.status
        self.raw_headers = exchange.raw_headers
        self._headers: CIMultiDictProxy[str] | None = None
        self._content_type: str | None = None
        self._exchange = exchange

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        """The header fields, decoded (made on first use)."""
        if self._headers is None:
            headers: CIMultiDict[str] = CIMultiDict()
            for name, value in self.raw_headers:
                headers.add(name.decode("latin-1"), value.decode("latin-1"))
            self._headers = CIMultiDictProxy(headers)
        return self._headers

    @property
    def content_type(self) -> str:
        if self._content_type is None:
            self._content_type = ""
            for name, value in self.raw_headers:
                if len(name) == 12 and name.lower() == b"content-type":
                    self._content_type = value.decode("latin-1")
                    break
        return self._content_type

    async def read(self) -> bytes:
        """The whole body. Raises StreamBroken."""
        try:
            return await self._exchange.read()
        except _TRANSPORT_ERRORS as exc:
            raise StreamBroken(self.partition, f"body broke: {exc}") from None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, in the pieces the transport delivers. Ends at the end of the
        body; raises StreamBroken when it breaks or (a watch) stays silent past its inactivity
        timeout."""
        try:
            async for chunk in self._exchange.chunks():
                yield chunk
        except _TRANSPORT_ERRORS as exc:
            raise StreamBroken(self.partition, str(exc) if isinstance(exc, TimedOut) else f"stream broke: {exc}") from None

    async def json(self) -> Any:
        """The body decoded as JSON; a non-2xx answer raises its APIError. Raises StreamBroken,
        APIError, ValueError (not JSON)."""
        raw = await self.read()
        if self.status >= 300:
            raise api_error(self.partition, self.status, raw)
        return orjson.loads(raw)

    def close(self) -> None:
        """Drop the connection (a stream the caller stops reading early)."""
        self._exchange.abort()


# Connection objects of the partition transport not yet freed, every partition's (/debug/memory):
# the transport's own count, named here because the transport is imported by this module only.
connection_objects = connections_alive
# ... and how much the open ones ever read at once, with the connections recycled for it
connection_reads = largest_reads


class PartitionClient:
    """See the module docstring. Built by `open_partition` (or by tests with credentials of
    their own)."""

    def __init__(
        self,
        *,
        name: str,
        role: PartitionRole,
        credentials: Credentials,
        timeouts: Timeouts,
        breaker: CircuitBreaker,
    ) -> None:
        self.name = name
        self.role = role
        self.endpoints: tuple[URL, ...] = credentials.endpoints
        self.breaker = breaker
        self._auth = credentials.auth_header
        self._timeouts = timeouts
        self._current = 0
        ssl_context = credentials.ssl_context if isinstance(credentials.ssl_context, ssl.SSLContext) else None
        tick = min(_MAX_TICK, max(_MIN_TICK, min(timeouts.request, timeouts.watch_inactivity) / _TICKS_PER_TIMEOUT))
        self._transports = tuple(
            Endpoint(url.host or "", url.port or (443 if url.scheme == "https" else 80), ssl_context if url.scheme == "https" else None,
                     connect_timeout=timeouts.connect, tick=tick, on_peer_closed=self._peer_closed)
            for url in self.endpoints
        )
        # Per endpoint: what every request to it carries (the request line's end, Host, the
        # proxy's own credential), computed once; `{prefix}` is the endpoint's path prefix.
        self._prefixes = tuple(url.raw_path.rstrip("/") for url in self.endpoints)
        self._fixed = tuple(
            f" HTTP/1.1\r\nHost: {url.raw_authority}\r\n" + (f"Authorization: {self._auth}\r\n" if self._auth else "")
            for url in self.endpoints
        )
        self._readyz_heads = tuple(f"GET {prefix}{READYZ_PATH}{fixed}\r\n".encode() for prefix, fixed in zip(self._prefixes, self._fixed))

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

    @property
    def connections(self) -> int:
        """Connections open to the partition now, every endpoint's."""
        return sum(t.connections for t in self._transports)

    @property
    def idle_connections(self) -> int:
        """Of those, the ones waiting for their next request, every endpoint's."""
        return sum(t.idle_connections for t in self._transports)

    def retry_after(self) -> int:
        return self.breaker.retry_after()

    def _rotate(self) -> None:
        """Use the next endpoint from now on (plain def: atomic)."""
        self._current = (self._current + 1) % len(self.endpoints)

    def _head(self, index: int, call: Call, body: Body) -> bytes:
        """The request line and headers of `call` for endpoint `index`, ending in the blank
        line. Raises InvalidRequest."""
        method, headers = call.method, call.headers
        target = f"{self._prefixes[index]}{call.path}?{call.query}" if call.query else self._prefixes[index] + call.path
        if _SPLITS_TARGET.search(target):
            raise InvalidRequest(f"the request target {target[:100]!r} contains white space")
        lines = [method, " ", target, self._fixed[index], call.header_block]
        if headers:
            fields = [f"{key}: {value}" for key, value in headers.items() if key.lower() not in _TRANSPORT_HEADERS]
            if fields:
                block = "\r\n".join(fields)
                if block.count("\n") >= len(fields) or block.count("\r") >= len(fields):
                    raise InvalidRequest("a header contains a line break")
                lines += (block, "\r\n")
        if call.identity is not None:
            lines.append(call.identity.impersonation)
        if body is None:
            if method in ("POST", "PUT", "PATCH"):
                lines.append("Content-Length: 0\r\n")
        elif isinstance(body, bytes):
            lines += ("Content-Length: ", str(len(body)), "\r\n")
        else:
            lines.append("Transfer-Encoding: chunked\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("utf-8", "surrogateescape")

    def request(
        self,
        method: str,
        path: str,
        *,
        query: str = "",
        headers: Mapping[str, str] | None = None,
        header_block: str = "",
        identity: Identity | None = None,
        body: Body = None,
        kind: RequestClass = RequestClass.REQUEST,
    ) -> Call:
        """One request, as an async context manager: entering sends it and gives its answer
        once the headers arrived (see the module docstring); leaving gives the connection back,
        or drops it when the answer was not read to its end. `path` and `query` are sent
        exactly as given (percent-encoded); `headers` go as given except the transport's own
        (Host, framing, Authorization); `header_block`: more header lines already written
        (`proxy.headers.upstream_header_block`, each ending in CRLF). A body without
        Content-Type goes without one (kube-apiserver reads it as JSON). Entering raises
        PartitionMarkedDown, PartitionUnreachable, PartitionTimedOut, InvalidRequest."""
        return Call(self, method, path, query, headers, header_block, identity, body, kind)

    async def _send(self, call: Call) -> Exchange:
        """Send `call` (to the next endpoint when one cannot be reached), recording its outcome
        with the breaker. Raises as `request`."""
        timeouts, breaker = self._timeouts, self.breaker
        watch = call.kind is RequestClass.WATCH
        body = call.body
        replayable = body is None or isinstance(body, bytes)
        attempts = len(self.endpoints)
        while True:
            index = self._current
            head = self._head(index, call, body)
            if not breaker.allow():
                raise PartitionMarkedDown(self.name, "marked down after repeated failures", self.retry_after(), breaker.remaining())
            trial = breaker.trial_in_flight  # allow() has just given this call the half-open trial (plain defs: atomic)
            exchange = None
            try:
                if not trial or await self._ready(index):
                    exchange = await self._transports[index].exchange(
                        head, body, head_timeout=timeouts.request, total_timeout=None if watch else timeouts.request,
                        inactivity=timeouts.watch_inactivity if watch else None,
                        replayable=replayable and call.method in _REPLAYABLE,
                    )
            except ConnectFailed as exc:
                self._failed(str(exc), suspect=True)
                # Nothing was sent: the next endpoint may take the request, even a mutating one.
                self._rotate()
                attempts -= 1
                if attempts <= 0 or not replayable:
                    raise PartitionUnreachable(self.name, str(exc), self.retry_after()) from None
                continue
            except TimedOut:
                self._failed("no answer within its deadline", suspect=False)
                self._rotate()
                raise PartitionTimedOut(self.name, "no answer within its deadline", self.retry_after()) from None
            except OSError as exc:  # broken before its answer
                self._failed(str(exc) or type(exc).__name__, suspect=True)
                self._rotate()
                raise PartitionUnreachable(self.name, str(exc) or type(exc).__name__, self.retry_after()) from None
            except BaseException:
                breaker.abandon()
                raise
            if exchange is None:  # the trial's endpoint answers but is not ready: nothing was sent
                breaker.not_ready(READINESS_PERIOD_SECONDS)
                self._rotate()
                raise PartitionMarkedDown(self.name, "not ready: its /readyz check fails", self.retry_after(), breaker.remaining())
            if trial:
                log.info("%s: served again: /readyz of %s answered 200", self.name, self.endpoints[index])
            breaker.success()
            return exchange

    def _peer_closed(self) -> None:
        """The partition closed a connection that waited in the pool or carried an answer (a
        watch's, usually): its process may have died, and a restarted kube-apiserver listens
        before its authorizers are ready. The next call asks /readyz first (`suspect`). Without
        this, a worker none of whose calls failed while the partition was down (its watches
        broke and their reflectors' next calls came after the restart) had those calls refused
        with 403 (docs/benchmarks.md, "403s after a partition's restart")."""
        breaker = self.breaker
        if breaker.state == "closed":
            breaker.suspect()
            log.info("%s: it closed a connection: its next request asks /readyz first", self.name)

    def _failed(self, why: str, *, suspect: bool) -> None:
        """Record a failure (and, when `suspect`, that the partition's process may have
        restarted) with the breaker, logging the first failure after the partition was up and
        its marking down (not each failed trial after)."""
        breaker = self.breaker
        was_up = breaker.state == "closed"
        breaker.failure()
        if suspect:
            breaker.suspect()
        if not was_up:
            return
        if breaker.is_open:
            log.warning("%s: marked down for %g s after %d failures in a row: %s", self.name, breaker.open_seconds, breaker.consecutive, why)
        elif suspect:
            log.info("%s: %s: its next request asks /readyz first", self.name, why)

    async def _ready(self, index: int) -> bool:
        """Whether endpoint `index` is ready to serve: its GET /readyz with the proxy's own
        credential answers 200. kube-apiserver answers 500 while one of its checks fails
        (informers not synced, etcd unreachable, shutting down), and in its first ~0.1 s of
        listening even 403, although /readyz is always allowed once it runs
        (`--authorization-always-allow-paths`): measured in tests/faults/test_recovery.py, where
        a read straight at the restarted kube-apiserver got 403 at the same instants. Raises the
        transport's errors, as a call would."""
        timeout = min(self._timeouts.request, READINESS_TIMEOUT_SECONDS)
        exchange = await self._transports[index].exchange(
            self._readyz_heads[index], None, head_timeout=timeout, total_timeout=timeout, inactivity=None, replayable=True,
        )
        try:
            await exchange.read()
        finally:
            exchange.finish()
        if exchange.status != 200:
            log.debug("%s: not ready: /readyz of %s answered %d", self.name, self.endpoints[index], exchange.status)
        return exchange.status == 200

    async def read_whole(
        self, method: str, path: str, *, query: str = "", headers: Mapping[str, str] | None = None,
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
        for transport in self._transports:
            transport.close()


class Call:
    """One request of `PartitionClient.request`: an async context manager (a class, not a
    generator: it is on every request's path)."""

    __slots__ = ("_client", "method", "path", "query", "headers", "header_block", "identity", "body", "kind", "_exchange")

    def __init__(self, client: PartitionClient, method: str, path: str, query: str, headers: Mapping[str, str] | None,
                 header_block: str, identity: Identity | None, body: Body, kind: RequestClass) -> None:
        self._client = client
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.header_block = header_block
        self.identity = identity
        self.body = body
        self.kind = kind
        self._exchange: Exchange | None = None

    async def __aenter__(self) -> UpstreamResponse:
        self._exchange = await self._client._send(self)
        return UpstreamResponse(self._client.name, self._exchange)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        exchange = self._exchange
        if exchange is not None:
            if exc_type is not None:
                exchange.abort()
            exchange.finish()


async def open_partition(
    partition: PartitionConfig,
    upstream: UpstreamConfig,
    failure: FailureConfig,
    *,
    clock: Callable[[], float] | None = None,
) -> PartitionClient:
    """The client of a configured partition: its kubeconfig loaded. Raises OSError or
    ValueError (from the kubeconfig loader) when the kubeconfig is unusable."""
    credentials = await load_credentials(partition.kubeconfig, extra_servers=partition.extra_servers)
    breaker = CircuitBreaker(failure.breaker_failures, failure.breaker_open_seconds)
    if clock is not None:
        breaker.clock = clock
    return PartitionClient(
        name=partition.name,
        role=partition.role,
        credentials=credentials,
        timeouts=Timeouts.from_config(upstream),
        breaker=breaker,
    )
