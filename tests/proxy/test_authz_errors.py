"""A partition that cannot be asked is not a denial: the proxy's authorizer reports it as an
error, answered 500 InternalError as kube-apiserver answers a failing authorizer
(k8s.io/apiserver/pkg/endpoints/filters/authorization.go), and a real denial still wins.
Pure: the partitions are stubs answering (or failing) the SubjectAccessReview POST."""

from __future__ import annotations

from typing import Any

import orjson

from config.models import AuthConfig
from proxy import answers
from proxy.authz import STALE_IF_ERROR_SECONDS, Authorizer, Decision
from proxy.clients.errors import PartitionUnavailable
from proxy.identity import Identity


class Partition:
    """What post_review needs of a PartitionClient: `name` and `send_json`."""

    def __init__(self, name: str, allowed: bool | None) -> None:
        self.name, self._allowed = name, allowed  # None: the partition cannot be asked

    async def send_json(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._allowed is None:
            raise PartitionUnavailable(self.name, "circuit breaker open", 5)
        return {**body, "status": {"allowed": self._allowed, "reason": "" if self._allowed else "no RBAC rule"}}


KUBELET = Identity("system:node:n1", ("system:nodes", "system:authenticated"))
WATCH_PODS = {"verb": "watch", "resource": "pods", "fieldSelector": "spec.nodeName=n1"}


async def _decide(**partitions: bool | None) -> Any:
    authz = Authorizer(AuthConfig(), {name: Partition(name, allowed) for name, allowed in partitions.items()})  # type: ignore[misc]
    return await authz.allowed(KUBELET, WATCH_PODS, list(partitions))


async def test_an_unreachable_partition_is_an_error_not_a_denial_and_is_not_remembered() -> None:
    decision = await _decide(tp1=True, tp2=None)
    assert (decision.allowed, decision.error) == (False, True)
    assert "circuit breaker open" in decision.reason
    answer = answers.authorization_error(decision.reason)
    status = orjson.loads(answer.body)
    assert (answer.status, status["code"], status["reason"]) == (500, 500, "InternalError")
    assert status["message"].startswith("Internal error occurred: ")


async def test_a_denial_wins_over_an_error_and_allowance_needs_every_partition() -> None:
    denied = await _decide(tp1=None, tp2=False)
    assert (denied.allowed, denied.error, denied.reason) == (False, False, "no RBAC rule")
    assert (await _decide(tp1=True, tp2=True)).allowed


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_partition_that_cannot_be_asked_is_answered_for_by_its_recent_answer() -> None:
    """tp2 answered the kubelet's question a minute ago and is down now: its answer stands (a
    kubelet's pod watch over every tenant partition keeps working); past STALE_IF_ERROR_SECONDS,
    or for a question it never answered, the error stands."""
    clock = Clock()
    tp1, tp2 = Partition("tp1", True), Partition("tp2", True)
    authz = Authorizer(AuthConfig(authorization_cache_seconds=10), {"tp1": tp1, "tp2": tp2}, clock=clock)  # type: ignore[dict-item]
    assert (await authz.allowed(KUBELET, WATCH_PODS, ["tp1", "tp2"])).allowed
    tp2._allowed = None
    clock.now += 60
    assert (await authz.allowed(KUBELET, WATCH_PODS, ["tp1", "tp2"])) == Decision(True)
    never_asked = await authz.allowed(KUBELET, {**WATCH_PODS, "fieldSelector": "spec.nodeName=n2"}, ["tp1", "tp2"])
    assert (never_asked.allowed, never_asked.error) == (False, True)
    clock.now += STALE_IF_ERROR_SECONDS
    too_old = await authz.allowed(KUBELET, WATCH_PODS, ["tp1", "tp2"])
    assert (too_old.allowed, too_old.error) == (False, True)


async def test_a_recent_denial_stands_too_and_a_fresh_answer_is_not_asked_again() -> None:
    clock = Clock()
    tp1 = Partition("tp1", False)
    asked: list[str] = []
    send = tp1.send_json

    async def counting(method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        asked.append(path)
        return await send(method, path, body)

    tp1.send_json = counting  # type: ignore[method-assign]
    authz = Authorizer(AuthConfig(authorization_cache_seconds=10), {"tp1": tp1}, clock=clock)  # type: ignore[dict-item]
    assert not (await authz.allowed(KUBELET, WATCH_PODS, ["tp1"])).allowed
    clock.now += 5
    assert not (await authz.allowed(KUBELET, WATCH_PODS, ["tp1"])).allowed
    assert len(asked) == 1  # fresh: not asked again
    tp1._allowed = None
    clock.now += 30
    assert await authz.allowed(KUBELET, WATCH_PODS, ["tp1"]) == Decision(False, "no RBAC rule")
    assert len(asked) == 2  # stale: asked, failed, the denial stands
