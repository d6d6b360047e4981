"""The request pipeline, assembled in one place.

    observe -> limits -> authenticate -> overload -> route -> impersonate -> watch_limits -> dispatch

(`proxy.pipeline.steps`, `proxy.pipeline.dispatch`). Every front end (HTTP/1.1, HTTP/2) hands
each request to `Pipeline.handle` with a writer of its own; the proxy's own endpoints
(`proxy.endpoints`: health, metrics, debug) are answered before the chain, without
authentication, as kube-apiserver answers /livez and /readyz.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from proxy.context import ProxyContext
from proxy.endpoints import Endpoints
from proxy.pipeline import steps
from proxy.pipeline.dispatch import Dispatch
from proxy.messages import ClientGone, Exchange, Request, ResponseWriter
from routing.requestinfo import is_long_running, parse_request_info

Handler = Callable[[Exchange], Awaitable[None]]


class Step(Protocol):
    async def __call__(self, ex: Exchange, next: Handler) -> None: ...  # pragma: no cover


def compose(chain: Sequence[Step], last: Handler) -> Handler:
    """One handler running `chain` in order, each step handing on to the next, `last` at the end."""
    handler = last
    for step in reversed(chain):
        handler = _link(step, handler)
    return handler


def _link(step: Step, next: Handler) -> Handler:
    async def run(ex: Exchange) -> None:
        await step(ex, next)

    return run


def default_steps(ctx: ProxyContext) -> list[Step]:
    """The chain of the module docstring, built from the context's parts."""
    config = ctx.config
    return [
        steps.Observe(ctx.metrics),
        steps.Limits(config.limits),
        steps.Authenticate(ctx.authn),
        steps.Overload(ctx.overload, ctx.metrics),
        steps.Route(ctx.routing, config.limits.max_body_bytes),
        steps.Impersonate(ctx.authz),
        steps.WatchLimits(ctx.watches),
    ]


class Pipeline:
    """Entry point of every request, whatever carried it."""

    def __init__(self, ctx: ProxyContext, chain: Sequence[Step] | None = None, last: Handler | None = None) -> None:
        self.ctx = ctx
        self.endpoints = Endpoints(ctx)
        self._handler = compose(default_steps(ctx) if chain is None else chain, last or Dispatch(ctx))

    async def handle(self, request: Request, writer: ResponseWriter) -> None:
        """Answer one request through `writer`. A client that goes away ends it quietly."""
        local = self.endpoints.find(request.method, request.raw_path)
        try:
            if local is not None:
                await writer.respond(await local(request))
                return
            info = parse_request_info(request.method, request.raw_path, request.query)
            await self._handler(Exchange(request, writer, info, is_long_running(info, request.query)))
        except ClientGone:
            pass
