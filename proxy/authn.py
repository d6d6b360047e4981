"""Authentication of clients.

Order, first that applies: a client certificate verified by the TLS layer (CN user, O groups,
as kube-apiserver's x509 authenticator); a bearer token found in the configured static tokens;
a bearer token accepted by a TokenReview sent with the proxy's own credential (answers cached
briefly, keyed by a SHA-256 of the token: the token itself is never stored, logged or
forwarded) to `auth.token_review_partition`, or for a service-account token to the tenant
partition owning the namespace its claims name (routing.tokens: only that partition can review
it); anonymous (`system:anonymous`, `system:unauthenticated`)
when enabled. Otherwise the request is unauthenticated and gets 401.

`system:masters` is dropped from every client identity: membership in it bypasses RBAC on the
partitions, and no client of the proxy may obtain that through the proxy.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Any

from cachetools import LRUCache, TTLCache

from config.models import AuthConfig
from collections.abc import Callable

from proxy.identity import MASTERS, Identity, identity_from_peercert
from proxy.clients.partition import PartitionClient
from proxy.reviews import ReviewError, post_review

log = logging.getLogger("partition_proxy.authn")

ANONYMOUS = Identity("system:anonymous", ("system:unauthenticated",))
# entries; distinct tokens remembered at once. 10,000 covers every kubelet of a large RP
# without letting a token-spraying client grow memory without bound.
_TOKEN_CACHE_SIZE = 10_000
# entries; distinct certificate subjects whose identity is remembered (each ~0.5 KB). A replica
# serves a few thousand kubelets; a subject beyond it is read again from its certificate.
_SUBJECT_CACHE_SIZE = 20_000


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def without_masters(identity: Identity) -> Identity:
    if MASTERS not in identity.groups:
        return identity
    return Identity(identity.user, tuple(g for g in identity.groups if g != MASTERS), identity.uid)


def _from_certificate(peercert: dict[str, Any]) -> Identity | None:
    identity = identity_from_peercert(peercert)
    return without_masters(identity) if identity is not None else None


# token -> the client of the partition that reviews it, None when tokens are not reviewed
ReviewerFn = Callable[[str], PartitionClient | None]


class Authenticator:
    def __init__(self, config: AuthConfig, token_review: ReviewerFn) -> None:
        self.config = config
        self.token_review = token_review
        self.static = {_digest(t.token): Identity(t.user, t.groups, t.uid) for t in config.static_tokens}
        self.cache: TTLCache[bytes, Identity | None] = TTLCache(
            maxsize=_TOKEN_CACHE_SIZE, ttl=max(config.token_cache_seconds, 0.001)
        )
        # A verified certificate's subject -> its identity: read once, so every request of a
        # client shares one Identity (and its impersonation header block).
        self.subjects: LRUCache[Any, Identity | None] = LRUCache(maxsize=_SUBJECT_CACHE_SIZE)

    def certificate_identity(self, peercert: dict[str, Any] | None) -> Identity | None:
        """The identity a verified client certificate (getpeercert() shape) names, or None (no
        certificate, or one that names nobody): the request's path that needs no waiting."""
        if not peercert:
            return None
        subject = peercert.get("subject")
        try:
            return self.subjects[subject]
        except KeyError:
            identity = self.subjects[subject] = _from_certificate(peercert)
            return identity
        except TypeError:  # a subject that cannot be a key (no real certificate has one)
            return _from_certificate(peercert)

    async def authenticate(self, peercert: dict[str, Any] | None, authorization: str) -> Identity | None:
        """The client's identity from its verified certificate (getpeercert() shape) or its
        Authorization header, or None (401)."""
        identity = self.certificate_identity(peercert)
        if identity is not None:
            return identity
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and token:
            found = await self._token(token)
            return without_masters(found) if found is not None else None
        return ANONYMOUS if self.config.anonymous else None

    async def _token(self, token: str) -> Identity | None:
        digest = _digest(token)
        for known, static in self.static.items():
            if hmac.compare_digest(known, digest):
                return static
        if digest in self.cache:
            return self.cache[digest]
        client = self.token_review(token)
        if client is None:
            return None
        identity, definite = await self._review(client, token)
        if definite:  # a partition that could not be asked is asked again next time
            self.cache[digest] = identity
        return identity

    async def _review(self, client: PartitionClient, token: str) -> tuple[Identity | None, bool]:
        """Ask `client`'s partition with a TokenReview (authentication.k8s.io/v1).
        Returns (identity or None, whether the answer is definite enough to cache)."""
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        try:
            status = await post_review(client, "/apis/authentication.k8s.io/v1/tokenreviews", review)
        except ReviewError as exc:
            log.warning("%s", exc)
            return None, False
        if not status.get("authenticated"):
            return None, True
        user = status.get("user") or {}
        return Identity(user.get("username", ""), tuple(user.get("groups") or ()), user.get("uid", "")), True
