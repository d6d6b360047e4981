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

from dataclasses import dataclass, field
from typing import Any


# Membership in it bypasses RBAC on the partitions: no client of the proxy may have it there.
MASTERS = "system:masters"


@dataclass(frozen=True, slots=True)
class Identity:
    """A client's user, groups and uid. `impersonation` is its impersonation header block
    (`Impersonate-User`, one `Impersonate-Group` per group, `Impersonate-Uid`; each line ending
    in CRLF), written once per identity and sent with every request made for it."""

    user: str
    groups: tuple[str, ...]
    uid: str = ""
    impersonation: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "impersonation", impersonation_block(self.user, self.groups, self.uid))


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


def impersonation_block(user: str, groups: tuple[str, ...], uid: str) -> str:
    """The impersonation headers of an identity as HTTP/1.1 header lines (CRLF after each). A
    line break inside a name would split the request: such a character is dropped (no
    certificate or TokenReview gives one; kube-apiserver's own parser would refuse it)."""
    lines = [f"Impersonate-User: {_one_line(user)}\r\n"]
    lines += (f"Impersonate-Group: {_one_line(group)}\r\n" for group in groups)
    if uid:
        lines.append(f"Impersonate-Uid: {_one_line(uid)}\r\n")
    return "".join(lines)


def _one_line(value: str) -> str:
    return value.replace("\r", "").replace("\n", "") if "\r" in value or "\n" in value else value
