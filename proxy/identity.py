"""Who the client is, and how that identity reaches the partitions.

Authentication is `proxy.authn`; this module reads identities from client certificates (the
subject's CN is the user and each O a group, as kube-apiserver's x509 authenticator,
`k8s.io/apiserver/pkg/authentication/request/x509`) and writes them as impersonation headers.

Forwarding: the proxy calls partitions with its own credentials plus `Impersonate-User` and one
`Impersonate-Group` per group (https://kubernetes.io/docs/reference/access-authn-authz/user-impersonation/).
`system:node:<name>` users and `system:nodes` pass intact, so the partitions' Node authorizer
and NodeRestriction judge kubelets as themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from multidict import CIMultiDict


# Membership in it bypasses RBAC on the partitions: no client of the proxy may have it there.
MASTERS = "system:masters"


@dataclass(frozen=True, slots=True)
class Identity:
    user: str
    groups: tuple[str, ...]
    uid: str = ""


def identity_from_peercert(peercert: dict[str, Any] | None) -> Identity | None:
    """The identity in a verified peer certificate (ssl.SSLSocket.getpeercert() shape)."""
    if not peercert:
        return None
    user = ""
    groups: list[str] = []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and not user:
                user = value
            elif key == "organizationName":
                groups.append(value)
    if not user:
        return None
    return Identity(user, tuple(groups))


def add_impersonation(headers: CIMultiDict[str], identity: Identity) -> None:
    """Add the impersonation headers for `identity` (the caller stripped the client's own)."""
    headers["Impersonate-User"] = identity.user
    for group in identity.groups:
        headers.add("Impersonate-Group", group)
    if identity.uid:
        headers["Impersonate-Uid"] = identity.uid
