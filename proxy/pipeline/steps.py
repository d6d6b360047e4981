"""The steps of the request pipeline, in the order `proxy.pipeline.chain` runs them (kcp's handler
chain is the model):

    observe -> limits -> authenticate -> route -> overload -> impersonate -> watch_limits -> dispatch

Each step is a small class holding what it needs (given at start-up), called with the exchange;
it returns True when it answered (the chain stops there) and False to let the next step run, or,
when it must wait (a body to read, a token or an impersonation to review, an answer to write), an
awaitable of that bool. Most requests wait in no step: a plain return costs no coroutine.
Steps run one after the other, not nested: what one holds for the request's lifetime (an
in-flight slot, an open-watch count, the request's metrics) is registered with `Exchange.hold`
and given back when the exchange closes, so a watch costs no coroutine frame per step while it
lives (and can outlive its task: `ResponseWriter.detach`). `dispatch` (cache, forward or union)
is in `proxy.pipeline.dispatch`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from config.models import LimitsConfig
from proxy import answers
from proxy.authn import Authenticator
from proxy.authz import Authorizer, ImpersonationRequest, impersonate, impersonation_request
from proxy.messages import Answer, Exchange, Outcome
from proxy.metrics import Metrics
from proxy.overload import FAN_OUT, InflightLimiter, Overloaded, request_class
from proxy.watch_limits import TooManyWatches, WatchLimiter
from routing.bodies import body_facts
from routing.decide import Route as Decision
from routing.decide import RouteKind, RoutingState, decide
from routing.sli import sli_labels

# what a step returns: True (it answered), False (go on), or an awaitable of either
Verdict = bool | Awaitable[bool]


async def refuse(ex: Exchange, answer: Answer) -> bool:
    """Answer `ex` with `answer`: the verdict of a step that refuses a request."""
    await ex.respond(answer)
    return True


class Observe:
    """Counts every API request (in flight, answered by route and code, duration) and feeds
    kube-apiserver's SLI histogram for requests that are not long-running. A request whose
    client left before the answer ended is counted with code 499, under the route it had."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def __call__(self, ex: Exchange) -> Verdict:
        self.metrics.requests.started("long-running" if ex.long_running else "other")
        ex.hold(self._record, ex, time.monotonic())
        return False

    def _record(self, ex: Exchange, started: float) -> None:
        """The exchange ended (`ex.outcome`): count it."""
        elapsed = time.monotonic() - started
        outcome, status = ex.outcome, ex.writer.status
        # 499: the client went away before the answer ended (a watch it closed, usually);
        # 500: an exception no step expected.
        code = "500" if outcome == Outcome.FAILED else str(status) if status and outcome == Outcome.DONE else "499"
        info = ex.info
        sli = None
        if not ex.long_running:
            labels = sli_labels(info, method=ex.request.method, content_type=ex.request.headers.get("Content-Type", ""))
            sli = labels.values() if labels is not None else None
        self.metrics.requests.ended("long-running" if ex.long_running else "other", info.verb or ex.request.method.lower(),
                                    ex.route_kind, ex.target, code, elapsed, sli)


class Limits:
    """413/414/431 for requests over the configured sizes, before anything is read."""

    def __init__(self, limits: LimitsConfig) -> None:
        self.limits = limits

    def __call__(self, ex: Exchange) -> Verdict:
        limits, request = self.limits, ex.request
        if len(request.raw_path) + len(request.query_string) + 1 > limits.max_url_bytes:
            return refuse(ex, answers.status_answer(414, "BadRequest", f"the request URL is longer than {limits.max_url_bytes} bytes"))
        headers = request.headers
        if headers and max(map(len, headers.keys())) + max(map(len, headers.values())) > limits.max_header_bytes:
            for key, value in headers.items():  # the longest name and the longest value may be two headers
                if len(key) + len(value) > limits.max_header_bytes:
                    return refuse(ex, answers.status_answer(431, "BadRequest", f"a request header is larger than {limits.max_header_bytes} bytes"))
        if request.content_length is not None and request.content_length > limits.max_body_bytes:
            return refuse(ex, answers.request_too_large())
        return False


class Authenticate:
    """Who the client is (`proxy.authn`): 401 when nobody."""

    def __init__(self, authn: Authenticator) -> None:
        self.authn = authn

    def __call__(self, ex: Exchange) -> Verdict:
        ex.identity = self.authn.certificate_identity(ex.request.peercert)
        if ex.identity is not None:
            return False
        return self._by_header(ex)

    async def _by_header(self, ex: Exchange) -> bool:
        ex.identity = await self.authn.authenticate(ex.request.peercert, ex.request.headers.get("Authorization", ""))
        if ex.identity is None:
            await ex.respond(answers.unauthorized())
            return True
        return False


class Overload:
    """Bounded in-flight requests per class and partition, and per identity (`proxy.overload`):
    429 beyond them. After `Route`: the partition a request goes to picks its budget (a request
    to several partitions has a budget of its own)."""

    def __init__(self, limiter: InflightLimiter, metrics: Metrics) -> None:
        self.limiter = limiter
        self.metrics = metrics

    def __call__(self, ex: Exchange) -> Verdict:
        assert ex.identity is not None and ex.route is not None
        route = ex.route
        klass, user = request_class(ex.request.method, ex.long_running), ex.identity.user
        partition = route.partitions[0] if route.kind is RouteKind.FORWARD else FAN_OUT
        try:
            self.limiter.acquire(klass, user, partition)
        except Overloaded as exc:
            self.metrics.rejected.labels(exc.request_class, exc.reason).inc()
            return refuse(ex, answers.too_many_requests(f"too many requests: {exc}"))
        ex.hold(self.limiter.release, klass, user, partition)
        return False


class Route:
    """Where the request goes (`routing.decide`). A create without a name in its URL is routed by
    the name in its body, a TokenReview by its token's namespace: the body is read here
    (bounded by `max_body_bytes`)."""

    def __init__(self, routing: Callable[[], RoutingState], max_body_bytes: int) -> None:
        self.routing = routing  # the routing state in force (replaced whole when the partition set changes)
        self.max_body_bytes = max_body_bytes

    def __call__(self, ex: Exchange) -> Verdict:
        state = self.routing()  # one state for the whole decision, even if a reload lands meanwhile
        route = decide(ex.info, state)
        if route.kind is RouteKind.NEEDS_BODY:
            return self._by_body(ex, state)
        return self._routed(ex, route)

    async def _by_body(self, ex: Exchange, state: RoutingState) -> bool:
        ex.body = await ex.request.body.read(self.max_body_bytes)
        if len(ex.body) > self.max_body_bytes:
            await ex.respond(answers.request_too_large())
            return True
        name, token_namespace = body_facts(ex.body, ex.request.headers.get("Content-Type", ""))
        verdict = self._routed(ex, decide(ex.info, state, body_name=name, token_namespace=token_namespace))
        return verdict if isinstance(verdict, bool) else await verdict

    @staticmethod
    def _routed(ex: Exchange, route: Decision) -> Verdict:
        if route.kind is RouteKind.REJECT:
            if route.plain_text:
                return refuse(ex, answers.plain_text(route.status_code, route.message))
            headers = {"Retry-After": str(route.retry_after)} if route.retry_after else None
            return refuse(ex, answers.status_answer(route.status_code, route.reason, route.message, headers=headers))
        ex.route = route
        ex.route_kind = route.kind.value
        return False


class Impersonate:
    """`kubectl --as`: the client's Impersonate-* headers, checked with SubjectAccessReviews on
    the owning partitions (`proxy.authz.impersonate`); 403 on any denial."""

    def __init__(self, authz: Authorizer) -> None:
        self.authz = authz

    def __call__(self, ex: Exchange) -> Verdict:
        wanted = impersonation_request(ex.request.headers)
        return False if wanted is None else self._reviewed(ex, wanted)

    async def _reviewed(self, ex: Exchange, wanted: ImpersonationRequest) -> bool:
        assert ex.identity is not None and ex.route is not None
        acting, message = await impersonate(self.authz, ex.identity, wanted, ex.route.partitions)
        if acting is None:
            await ex.respond(answers.forbidden_message(message))
            return True
        ex.identity = acting
        return False


class WatchLimits:
    """Open watches per identity (`proxy.limits`): 429 beyond `max_watches_per_identity`."""

    def __init__(self, watches: WatchLimiter) -> None:
        self.watches = watches

    def __call__(self, ex: Exchange) -> Verdict:
        if ex.info.verb != "watch":
            return False
        assert ex.identity is not None
        user = ex.identity.user
        try:
            self.watches.acquire(user)
        except TooManyWatches:
            return refuse(ex, answers.too_many_requests(f"too many open watches for this user (limit {self.watches.limit})"))
        ex.hold(self.watches.release, user)
        return False
