"""Each step of the request pipeline on its own: a request made by hand, a writer that records
the answer, and a `next` that records whether the step passed the exchange on. Collaborators
that would ask a partition (authorization reviews) are replaced by objects answering as told."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from config import parse_config
from config.models import AuthConfig, FailureConfig, LimitsConfig
from proxy.authn import Authenticator
from proxy.authz import Decision
from proxy.identity import Identity
from proxy.metrics import Metrics
from proxy.messages import Answer, Exchange, Headers, Outcome, Request
from proxy.overload import InflightLimiter, Overloaded
from proxy.pipeline import steps
from proxy.pipeline.chain import Pipeline
from proxy.watch_limits import WatchLimiter
from routing.decide import RouteKind, RoutingState
from routing.placement import Placement
from routing.requestinfo import is_long_running, parse_request_info

CONFIG = parse_config({
    "partitions": [
        {"name": "tp1", "role": "tenant", "kubeconfig": "/k/tp1"},
        {"name": "tp2", "role": "tenant", "kubeconfig": "/k/tp2"},
        {"name": "rp1", "role": "resource", "kubeconfig": "/k/rp1"},
    ],
    "system_partition": "tp1",
    "tenants": {"ranges": [{"first": "a", "last": "m", "partition": "tp1"}, {"first": "n", "last": "z", "partition": "tp2"}]},
    "nodes": {"placement": "prefix", "prefixes": {"rp1-": "rp1"}},
})
ROUTING = RoutingState(Placement.from_config(CONFIG), frozenset({("", "pods"), ("", "configmaps")}))
ALICE = Identity("alice", ("dev",))


class Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    @property
    def can_read(self) -> bool:
        return bool(self.data)

    async def read(self, limit: int) -> bytes:
        return self.data[: limit + 1]

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self.data


@dataclass
class Writer:
    answers: list[Answer] = field(default_factory=list)
    writes: list[bytes] = field(default_factory=list)
    status: int | None = None
    started: bool = False
    connection: object = "conn-1"

    async def respond(self, answer: Answer) -> None:
        self.answers.append(answer)
        self.status = answer.status

    async def start(self, status: int, headers: Headers, *, content_type: str | None = None) -> None:
        self.status, self.started = status, True

    async def write(self, data: bytes) -> None:
        self.writes.append(data)

    async def end(self) -> None:
        pass

    async def accept_websocket(self, protocol: str) -> Any:
        return None

    async def accept_upgrade(self, head: bytes) -> Any:
        return None

    def detach(self, source: Any, *, deadline: float, on_end: Any) -> bool:
        return False

    @property
    def only(self) -> dict[str, Any]:
        [answer] = self.answers
        doc = orjson.loads(answer.body)
        assert isinstance(doc, dict)
        return doc | {"_status": answer.status, "_headers": dict(answer.headers or {})}


def exchange(method: str = "GET", path: str = "/api/v1/namespaces/alpha-web/pods", query: Mapping[str, str] | None = None,
             headers: Mapping[str, str] | None = None, body: bytes = b"", identity: Identity | None = ALICE) -> Exchange:
    query = dict(query or {})
    info = parse_request_info(method, path, query)
    request = Request(
        method=method, raw_path=path, query_string="&".join(f"{k}={v}" for k, v in query.items()), query=query,
        headers=CIMultiDictProxy(CIMultiDict(headers or {})), body=Body(body), peercert=None,
        content_length=len(body) if body else None,
    )
    return Exchange(request, Writer(), info, is_long_running(info, query), identity=identity)


async def passes(step: Any, ex: Exchange) -> bool:
    """Run one step: True when it let the exchange go on (it did not answer). A step answers
    with a bool when it has nothing to wait for, else with an awaitable of one."""
    verdict = step(ex)
    return not (verdict if isinstance(verdict, bool) else await verdict)


def writer(ex: Exchange) -> Writer:
    assert isinstance(ex.writer, Writer)
    return ex.writer


# --- limits -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"query": {"labelSelector": "x" * 300}}, 414),
        ({"headers": {"X-Big": "y" * 2000}}, 431),
        ({"method": "POST", "body": b"z" * 2000}, 413),
    ],
)
async def test_limits_answer_requests_over_the_configured_sizes_before_reading_them(kwargs: dict[str, Any], code: int) -> None:
    step = steps.Limits(LimitsConfig(max_url_bytes=256, max_header_bytes=1024, max_body_bytes=1000))
    ex = exchange(**kwargs)
    assert not await passes(step, ex)
    assert writer(ex).only["_status"] == code and writer(ex).only["kind"] == "Status"


async def test_limits_pass_a_request_within_them() -> None:
    ex = exchange()
    assert await passes(steps.Limits(LimitsConfig()), ex) and not writer(ex).answers


# --- authenticate -------------------------------------------------------------------------------


async def test_authenticate_finds_a_static_token_and_drops_system_masters() -> None:
    auth = AuthConfig(static_tokens=[{"token": "sekrit-token", "user": "bob", "groups": ["system:masters", "ops"]}])
    ex = exchange(headers={"Authorization": "Bearer sekrit-token"}, identity=None)
    assert await passes(steps.Authenticate(Authenticator(auth, lambda token: None)), ex)
    assert ex.identity == Identity("bob", ("ops",))


async def test_authenticate_answers_401_to_nobody() -> None:
    ex = exchange(headers={"Authorization": "Bearer wrong-token"}, identity=None)
    assert not await passes(steps.Authenticate(Authenticator(AuthConfig(), lambda token: None)), ex)
    assert writer(ex).only["_status"] == 401 and writer(ex).only["reason"] == "Unauthorized"


async def test_authenticate_reads_the_verified_client_certificate() -> None:
    ex = exchange(identity=None)
    ex.request.peercert = {"subject": ((("commonName", "system:node:rp1-n1"),), (("organizationName", "system:nodes"),))}
    assert await passes(steps.Authenticate(Authenticator(AuthConfig(), lambda token: None)), ex)
    assert ex.identity == Identity("system:node:rp1-n1", ("system:nodes",))


# --- overload -----------------------------------------------------------------------------------


async def routed_exchange(method: str = "GET", path: str = "/api/v1/namespaces/alpha-web/pods", **kwargs: Any) -> Exchange:
    """An exchange that went through the Route step, as the Overload step gets it."""
    ex = exchange(method, path, **kwargs)
    assert await passes(steps.Route(lambda: ROUTING, 1000), ex)
    return ex


async def test_overload_admits_up_to_the_class_limit_then_answers_429_with_retry_after() -> None:
    limiter = InflightLimiter(FailureConfig(max_inflight_readonly=1))
    metrics = Metrics.create()
    step = steps.Overload(limiter, metrics)
    first = await routed_exchange()
    assert await passes(step, first)  # holds its slot until it closes
    second = await routed_exchange()
    assert not await passes(step, second)
    assert writer(second).only["_status"] == 429 and writer(second).only["_headers"]["Retry-After"] == "1"
    assert "read-only requests to tp1 at their in-flight limit" in writer(second).only["message"]
    assert metrics.rejected.labels("read-only", "class")._value.get() == 1
    first.close(Outcome.DONE)  # the slot is given back
    assert await passes(step, await routed_exchange())


async def test_overload_budgets_are_per_partition_so_a_stalled_partition_refuses_only_its_own() -> None:
    # A partition that stalls holds the requests sent to it until their clients give up: it
    # may fill its own budget, not the other partitions' (each kube-apiserver bounds its own).
    limiter = InflightLimiter(FailureConfig(max_inflight_mutating=2, max_inflight_readonly=2))
    step = steps.Overload(limiter, Metrics.create())
    stalled = [await routed_exchange("PUT", f"/api/v1/namespaces/nova-web/configmaps/c{i}") for i in range(2)]  # tp2
    for ex in stalled:
        assert await passes(step, ex)
    assert not await passes(step, await routed_exchange("PUT", "/api/v1/namespaces/nova-web/configmaps/c"))  # tp2 is full
    assert await passes(step, await routed_exchange("PUT", "/api/v1/namespaces/alpha-web/configmaps/c"))  # tp1 is not
    union = [await routed_exchange("GET", "/api/v1/pods") for _ in range(2)]  # every TP: a budget of its own
    assert all([await passes(step, ex) for ex in union])
    assert not await passes(step, await routed_exchange("GET", "/api/v1/pods"))
    assert await passes(step, await routed_exchange("GET", "/api/v1/namespaces/nova-web/configmaps"))
    assert sum(limiter.inflight["mutating"].values()) == 3 and sum(limiter.inflight["read-only"].values()) == 3
    for ex in stalled + union:
        ex.close(Outcome.GONE)
    assert limiter.inflight["mutating"] == {"tp1": 1} and limiter.inflight["read-only"] == {"tp2": 1}


def test_the_limiter_forgets_a_partition_with_nothing_in_flight_and_bounds_watches_for_the_process() -> None:
    limiter = InflightLimiter(FailureConfig(max_inflight_long_running=1))
    limiter.acquire("read-only", "alice", "rp9")
    limiter.release("read-only", "alice", "rp9")
    assert limiter.inflight["read-only"] == {} and limiter.by_identity == {}  # a retired partition leaves no key
    limiter.acquire("long-running", "alice", "tp1")
    with pytest.raises(Overloaded):
        limiter.acquire("long-running", "bob", "tp2")  # one budget, whatever the partition
    limiter.release("long-running", "alice", "tp1")
    limiter.acquire("long-running", "bob", "tp2")


# --- route --------------------------------------------------------------------------------------


async def test_route_decides_and_labels_the_exchange() -> None:
    ex = exchange(path="/api/v1/namespaces/nova-web/pods/p")
    assert await passes(steps.Route(lambda: ROUTING, 1000), ex)
    assert ex.route is not None and ex.route.kind is RouteKind.FORWARD and ex.route.partitions == ("tp2",)
    assert ex.route_kind == "forward"


async def test_route_reads_a_create_body_for_its_name() -> None:
    ex = exchange("POST", "/api/v1/namespaces", body=b'{"metadata":{"name":"nova-web"}}', headers={"Content-Type": "application/json"})
    assert await passes(steps.Route(lambda: ROUTING, 1000), ex)
    assert ex.route is not None and ex.route.partitions == ("tp2",) and ex.body == b'{"metadata":{"name":"nova-web"}}'


async def test_route_refuses_a_create_body_over_the_limit() -> None:
    ex = exchange("POST", "/api/v1/namespaces", body=b"x" * 100)
    assert not await passes(steps.Route(lambda: ROUTING, 10), ex)
    assert writer(ex).only["_status"] == 413


async def test_route_answers_an_unknown_partition_prefix_as_kube_apiserver_answers_an_unknown_path() -> None:
    ex = exchange(path="/partitions/nope/api/v1/pods")
    assert not await passes(steps.Route(lambda: ROUTING, 1000), ex)
    [answer] = writer(ex).answers
    assert (answer.status, answer.body, answer.content_type) == (404, b"404 page not found\n", "text/plain; charset=utf-8")


# --- impersonate --------------------------------------------------------------------------------


class Authz:
    def __init__(self, allow: bool) -> None:
        self.allow = allow
        self.asked: list[tuple[Identity, dict[str, Any], tuple[str, ...]]] = []

    async def allowed(self, identity: Identity, attributes: dict[str, Any], partitions: Any, *, trust: bool = True) -> Decision:
        self.asked.append((identity, attributes, tuple(partitions)))
        return Decision(self.allow, "" if self.allow else "denied")


async def routed(ex: Exchange) -> Exchange:
    assert await passes(steps.Route(lambda: ROUTING, 1000), ex)
    return ex


async def test_impersonate_acts_as_the_requested_identity_once_the_owning_partitions_allow_it() -> None:
    authz = Authz(True)
    ex = await routed(exchange(headers={"Impersonate-User": "carol", "Impersonate-Group": "qa"}))
    assert await passes(steps.Impersonate(authz), ex)  # type: ignore[arg-type]
    assert ex.identity == Identity("carol", ("qa", "system:authenticated"))
    assert {a["resource"] for _, a, _ in authz.asked} == {"users", "groups"} and {p for _, _, p in authz.asked} == {("tp1",)}


async def test_impersonate_answers_403_on_any_denial_and_never_grants_system_masters() -> None:
    ex = await routed(exchange(headers={"Impersonate-User": "carol"}))
    assert not await passes(steps.Impersonate(Authz(False)), ex)  # type: ignore[arg-type]
    assert writer(ex).only["_status"] == 403
    ex = await routed(exchange(headers={"Impersonate-User": "carol", "Impersonate-Group": "system:masters"}))
    assert not await passes(steps.Impersonate(Authz(True)), ex)  # type: ignore[arg-type]
    assert writer(ex).only["_status"] == 403


async def test_impersonate_leaves_a_request_without_impersonation_headers_alone() -> None:
    authz = Authz(False)
    ex = await routed(exchange())
    assert await passes(steps.Impersonate(authz), ex)  # type: ignore[arg-type]
    assert ex.identity == ALICE and not authz.asked


# --- watch limits -------------------------------------------------------------------------------


async def test_watch_limits_count_open_watches_per_identity() -> None:
    limiter = WatchLimiter(1)
    step = steps.WatchLimits(limiter)
    first = exchange(query={"watch": "1"})
    assert await passes(step, first)
    second = exchange(query={"watch": "1"})
    assert not await passes(step, second)
    assert writer(second).only["_status"] == 429 and "limit 1" in writer(second).only["message"]
    assert await passes(step, exchange(query={"watch": "1"}, identity=Identity("bob", ())))  # its own count
    assert await passes(step, exchange())  # lists are not watches
    first.close(Outcome.GONE)
    assert limiter.open == {"bob": 1}


# --- observe ------------------------------------------------------------------------------------


async def test_observe_counts_the_answer_under_its_route_and_feeds_the_sli_histogram() -> None:
    metrics = Metrics.create()
    ex = await routed(exchange(path="/api/v1/namespaces/alpha-web/pods/p"))
    assert await passes(steps.Observe(metrics), ex)
    await ex.respond(Answer(200, b"{}"))
    ex.close(Outcome.DONE)
    assert metrics.registry.get_sample_value("partition_proxy_requests_total", {"verb": "get", "route": "forward", "partition": "", "code": "200"}) == 1
    sli = metrics.registry.get_sample_value("apiserver_request_sli_duration_seconds_count", {
        "verb": "GET", "group": "", "version": "v1", "resource": "pods", "subresource": "", "scope": "resource", "component": "apiserver"})
    assert sli == 1


@pytest.mark.parametrize(("outcome", "code"), [(Outcome.GONE, "499"), (Outcome.FAILED, "500")])
async def test_observe_counts_a_client_that_went_away_as_499_and_a_failure_as_500(outcome: str, code: str) -> None:
    metrics = Metrics.create()
    ex = await routed(exchange(query={"watch": "1"}))
    assert await passes(steps.Observe(metrics), ex)
    ex.target = "tp1"
    await ex.writer.start(200, CIMultiDict())  # the watch had begun
    assert metrics.registry.get_sample_value("partition_proxy_inflight_requests", {"kind": "long-running"}) == 1
    ex.close(outcome)
    assert metrics.registry.get_sample_value("partition_proxy_requests_total", {"verb": "watch", "route": "forward", "partition": "tp1", "code": code}) == 1
    assert metrics.registry.get_sample_value("partition_proxy_inflight_requests", {"kind": "long-running"}) == 0


async def test_an_exchange_gives_back_what_its_steps_hold_once_in_reverse_order() -> None:
    order: list[str] = []
    ex = exchange()
    ex.hold(lambda name: order.append(f"{name} {ex.outcome}"), "first")
    ex.hold(order.append, "second")
    ex.hold(lambda: order.append("third"))
    ex.close(Outcome.DONE)
    ex.close(Outcome.GONE)
    assert order == ["third", "second", "first done"]
    assert ex.outcome == Outcome.DONE


async def test_the_pipeline_runs_the_steps_in_order_until_one_answers() -> None:
    order: list[str] = []

    def step(name: str, answer: bool = False) -> Any:
        async def run(ex: Exchange) -> bool:
            order.append(name)
            if answer:
                await ex.respond(Answer(418))
            return answer

        return run

    async def last(ex: Exchange) -> None:
        order.append("last")

    pipeline = Pipeline.__new__(Pipeline)
    pipeline._steps, pipeline._last = (step("a"), step("b", answer=True), step("c")), last
    await pipeline.run(exchange())
    assert order == ["a", "b"]
    order.clear()
    pipeline._steps = (step("a"), step("c"))
    await pipeline.run(exchange())
    assert order == ["a", "c", "last"]


async def test_the_pipeline_takes_a_plain_bool_or_an_awaitable_from_each_step() -> None:
    order: list[str] = []

    def plain(name: str, verdict: bool = False) -> Any:
        def run(ex: Exchange) -> bool:
            order.append(name)
            return verdict

        return run

    async def last(ex: Exchange) -> None:
        order.append("last")

    async def waits(ex: Exchange) -> bool:
        order.append("waits")
        return False

    pipeline = Pipeline.__new__(Pipeline)
    pipeline._steps, pipeline._last = (plain("a"), waits, plain("b", verdict=True), plain("c")), last
    await pipeline.run(exchange())
    assert order == ["a", "waits", "b"]


async def test_a_certificate_clients_routed_get_waits_in_no_step() -> None:
    """The steps of a request that needs no body, token review, impersonation review or refusal
    answer with a plain False: none makes a coroutine the pipeline must run."""
    ex = exchange(identity=None)
    ex.request.peercert = {"subject": ((("commonName", "system:node:rp1-n1"),), (("organizationName", "system:nodes"),))}
    metrics = Metrics.create()
    chain: list[Any] = [
        steps.Observe(metrics), steps.Limits(LimitsConfig()), steps.Authenticate(Authenticator(AuthConfig(), lambda token: None)),
        steps.Route(lambda: ROUTING, 1000), steps.Overload(InflightLimiter(FailureConfig()), metrics),
        steps.Impersonate(Authz(allow=False)),  # type: ignore[arg-type]
        steps.WatchLimits(WatchLimiter(10)),
    ]
    assert [step(ex) for step in chain] == [False] * len(chain)
    assert ex.route is not None and ex.route.partitions == ("tp1",)
    ex.close(Outcome.DONE)
