"""The request pipeline, assembled in one place.

    observe -> limits -> authenticate -> route -> overload -> impersonate -> watch_limits -> dispatch

(`proxy.pipeline.steps`, `proxy.pipeline.dispatch`). Every front end (HTTP/1.1, HTTP/2) hands
each request to `Pipeline.handle` with a writer of its own; the proxy's own endpoints
(`proxy.handlers.endpoints`: health, metrics, debug) are answered before the chain, without
authentication, as kube-apiserver answers /livez and /readyz.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from proxy.context import ProxyContext
from proxy.handlers.endpoints import Endpoints
from proxy.pipeline import steps
from proxy.pipeline.dispatch import Dispatch
from proxy.messages import ClientGone, Exchange, Outcome, Request, ResponseWriter
from routing.requestinfo import is_long_running, parse_request_info

Handler = Callable[[Exchange], Awaitable[None]]


class Step(Protocol):
    # True: it answered; False: go on; an awaitable of either when it must wait (steps.Verdict)
    def __call__(self, ex: Exchange) -> bool | Awaitable[bool]: ...  # pragma: no cover


def default_steps(ctx: ProxyContext) -> list[Step]:
    """The chain of the module docstring, built from the context's parts."""
    config = ctx.config
    return [
        steps.Observe(ctx.metrics),
        steps.Limits(config.limits),
        steps.Authenticate(ctx.authn),
        steps.Route(lambda: ctx.routing, config.limits.max_body_bytes),
        steps.Overload(ctx.overload, ctx.metrics),
        steps.Impersonate(ctx.authz),
        steps.WatchLimits(ctx.watches),
    ]


class Pipeline:
    """Entry point of every request, whatever carried it. `debug_partitions` is what
    /debug/partitions shows (proxy.partition_set.PartitionSet.debug)."""

    def __init__(self, ctx: ProxyContext, chain: Sequence[Step] | None = None, last: Handler | None = None, *,
                 debug_partitions: Callable[[], dict[str, Any]] | None = None) -> None:
        self.ctx = ctx
        self.endpoints = Endpoints(ctx, debug_partitions=debug_partitions)
        self._steps = tuple(default_steps(ctx) if chain is None else chain)
        self._last = last or Dispatch(ctx)

    async def handle(self, request: Request, writer: ResponseWriter) -> None:
        """Answer one request through `writer`. A client that goes away ends it quietly. The
        exchange is closed (everything its steps hold given back) when this returns, unless a
        front end took its stream on (`ex.detached`: that front end closes it)."""
        local = self.endpoints.find(request.method, request.raw_path)
        if local is not None:
            try:
                await writer.respond(await local(request))
            except ClientGone:
                pass
            return
        info = parse_request_info(request.method, request.raw_path, request.query)
        ex = Exchange(request, writer, info, is_long_running(info, request.query))
        outcome = Outcome.FAILED
        try:
            await self.run(ex)
            outcome = Outcome.DONE
        except (ClientGone, asyncio.CancelledError) as exc:
            outcome = Outcome.GONE
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if not ex.detached:
                ex.close(outcome)

    async def run(self, ex: Exchange) -> None:
        """The steps in order until one answers, then the last (dispatch)."""
        for step in self._steps:
            verdict = step(ex)
            if verdict is False:
                continue
            if verdict is True or await verdict:  # not a bool: an awaitable of one
                return
        await self._last(ex)
