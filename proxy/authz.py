"""Authorization the proxy must do itself, with SubjectAccessReviews (authorization.k8s.io/v1)
sent to the partitions with the proxy's own credential:

1. Reads answered from a watch cache. Forwarded requests are authorized by the partition that
   receives them; a cached answer never reaches a partition, so the proxy asks each partition the
   answer comes from whether the client may `verb` the resource (with its namespace, name and
   selectors, which the Node authorizer uses), and answers 403 unless every one says yes.
2. A client asking to impersonate (`kubectl --as`, `Impersonate-*` headers). The proxy already
   impersonates the client, and impersonation does not nest, so it does what kube-apiserver's
   impersonation filter does (`k8s.io/apiserver/pkg/endpoints/filters/impersonation`): ask the
   owning partitions whether the client may `impersonate` each requested user, group, uid and
   extra, then act as the requested identity. Any denial is 403. `system:masters` can never be
   requested.

Answers are cached briefly (`auth.authorization_cache_seconds`) per question. A partition that
cannot be asked (down, breaker open, timed out) is answered for by its own last answer to the
same question when that is at most STALE_IF_ERROR_SECONDS old, so one partition down does not
fail every cached read that spans it (a kubelet's pod watch over every tenant partition);
without such an answer, the error stands (500, as kube-apiserver answers a failing authorizer).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from cachetools import LRUCache
from multidict import CIMultiDictProxy

from config.models import AuthConfig
from proxy.identity import MASTERS, Identity
from proxy.clients.partition import PartitionClient
from proxy.reviews import ReviewError, post_review

log = logging.getLogger("partition_proxy.authz")

# entries; distinct questions remembered at once (user x verb x resource x namespace x name).
_CACHE_SIZE = 50_000
# seconds: how old a partition's answer may be and still stand in for it while it cannot be
# asked. kube-apiserver authorizes a watch once, when it opens, and serves it until its timeout
# (client-go: 5 to 10 minutes), so a watcher already relies on an answer this old, and a
# kubelet's watches reopen about that often. With 5 minutes (the webhook authorizer's cached
# "allowed", --authorization-webhook-cache-authorized-ttl) the 60-minute soak still saw 497-674
# 500s on kubelets' cached reads in each 12 s outage of the system partition.
STALE_IF_ERROR_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class Decision:
    """A partition's answer. `error`: it could not be asked (down, overloaded, timed out): not a
    denial, which kube-apiserver's authorization filter answers 500 InternalError, not 403
    (k8s.io/apiserver/pkg/endpoints/filters/authorization.go)."""

    allowed: bool
    reason: str = ""
    error: bool = False


class Authorizer:
    def __init__(self, config: AuthConfig, clients: Mapping[str, PartitionClient], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clients = clients
        self.trusted = frozenset(config.trusted_groups)
        self._fresh = config.authorization_cache_seconds
        self._clock = clock
        # question -> (clock time answered, answer): fresh for `_fresh` seconds, then kept (LRU)
        # to stand in for its partition while the partition cannot be asked
        self.cache: LRUCache[Any, tuple[float, Decision]] = LRUCache(maxsize=_CACHE_SIZE)

    async def allowed(
        self, identity: Identity, attributes: dict[str, Any], partitions: Sequence[str], *, trust: bool = True
    ) -> Decision:
        """Whether every partition allows `identity` the `resourceAttributes`. With `trust`,
        members of `auth.trusted_groups` are allowed without asking."""
        if trust and self.trusted.intersection(identity.groups):
            return Decision(True)
        answers = await asyncio.gather(*(self._ask(identity, attributes, p) for p in partitions))
        denied = [decision for decision in answers if not decision.allowed]
        if not denied:
            return Decision(True)
        return next((d for d in denied if not d.error), denied[0])  # a denial wins over an error

    async def _ask(self, identity: Identity, attributes: dict[str, Any], partition: str) -> Decision:
        # A digest of the attributes: orjson's output buffer is over-allocated (2 KiB held for a
        # 200-byte question), and a proxy with thousands of watchers by name keeps one per name.
        key = (partition, identity, hashlib.blake2b(orjson.dumps(attributes, option=orjson.OPT_SORT_KEYS), digest_size=16).digest())
        cached = self.cache.get(key)
        now = self._clock()
        if cached is not None and now - cached[0] < self._fresh:
            return cached[1]
        spec: dict[str, Any] = {"user": identity.user, "groups": list(identity.groups), "resourceAttributes": attributes}
        if identity.uid:
            spec["uid"] = identity.uid
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        try:
            status = await post_review(self.clients[partition], "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        except ReviewError as exc:
            if cached is not None and now - cached[0] <= STALE_IF_ERROR_SECONDS:
                log.debug("%s cannot be asked (%s): its answer of %.0f s ago stands", partition, exc, now - cached[0])
                return cached[1]
            return Decision(False, str(exc), error=True)  # not cached: the next request asks again
        decision = Decision(bool(status.get("allowed")) and not status.get("denied"), status.get("reason", ""))
        self.cache[key] = (now, decision)
        return decision


@dataclass(frozen=True, slots=True)
class ImpersonationRequest:
    user: str
    groups: tuple[str, ...]
    uid: str
    extra: tuple[tuple[str, str], ...]


def impersonation_request(headers: CIMultiDictProxy[str]) -> ImpersonationRequest | None:
    """The impersonation a client asked for with Impersonate-* headers, or None."""
    if not any(map(_is_impersonation, headers.keys())):  # nearly every request: one pass, no parsing
        return None
    user = headers.get("Impersonate-User", "")
    groups = tuple(headers.getall("Impersonate-Group", []))
    uid = headers.get("Impersonate-Uid", "")
    extra = tuple(
        (key[len("Impersonate-Extra-") :].lower(), value)
        for key, value in headers.items()
        if key.lower().startswith("impersonate-extra-")
    )
    if not (user or groups or uid or extra):
        return None
    return ImpersonationRequest(user, groups, uid, extra)


@functools.lru_cache(maxsize=1024)  # header names: clients send the same few on every request
def _is_impersonation(name: str) -> bool:
    return name[:12].lower() == "impersonate-"


def forbidden_message(identity: Identity, resource: str, name: str, group: str = "") -> str:
    """kube-apiserver's wording for a denied impersonation."""
    api_group = f'"{group}"'
    return (
        f'{resource} "{name}" is forbidden: User "{identity.user}" cannot impersonate resource '
        f'"{resource}" in API group {api_group} at the cluster scope'
    )


async def impersonate(
    authorizer: Authorizer, identity: Identity, wanted: ImpersonationRequest, partitions: Sequence[str]
) -> tuple[Identity | None, str]:
    """The identity to act as, or (None, message) when any requested part is denied."""
    if not wanted.user:
        return None, "requested impersonation without a user (Impersonate-User is required)"
    if MASTERS in wanted.groups:
        return None, forbidden_message(identity, "groups", MASTERS)
    checks: list[tuple[dict[str, Any], str, str, str]] = []
    if wanted.user.startswith("system:serviceaccount:") and wanted.user.count(":") == 3:
        _, _, namespace, name = wanted.user.split(":")
        checks.append(({"verb": "impersonate", "resource": "serviceaccounts", "namespace": namespace, "name": name}, "serviceaccounts", name, ""))
    else:
        checks.append(({"verb": "impersonate", "resource": "users", "name": wanted.user}, "users", wanted.user, ""))
    for group in wanted.groups:
        checks.append(({"verb": "impersonate", "resource": "groups", "name": group}, "groups", group, ""))
    if wanted.uid:
        checks.append(
            ({"verb": "impersonate", "group": "authentication.k8s.io", "resource": "uids", "name": wanted.uid}, "uids", wanted.uid, "authentication.k8s.io")
        )
    for key, value in wanted.extra:
        checks.append(
            (
                {"verb": "impersonate", "group": "authentication.k8s.io", "resource": "userextras", "subresource": key, "name": value},
                f"userextras/{key}",
                value,
                "authentication.k8s.io",
            )
        )
    decisions = await asyncio.gather(*(authorizer.allowed(identity, attrs, partitions, trust=False) for attrs, _, _, _ in checks))
    for (attrs, resource, name, group), decision in zip(checks, decisions):
        if not decision.allowed:
            return None, forbidden_message(identity, resource, name, group)
    groups = wanted.groups if "system:authenticated" in wanted.groups else wanted.groups + ("system:authenticated",)
    return Identity(wanted.user, groups, wanted.uid), ""
