"""A partition that cannot be asked is not a denial: the proxy's authorizer reports it as an
error, answered 500 InternalError as kube-apiserver answers a failing authorizer
(k8s.io/apiserver/pkg/endpoints/filters/authorization.go), and a real denial still wins.
Pure: the partitions are stubs answering (or failing) the SubjectAccessReview POST."""

from __future__ import annotations

from typing import Any

import orjson

from config.models import AuthConfig
from proxy import answers
from proxy.authz import Authorizer
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
