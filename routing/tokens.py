"""Which namespace a service-account token was issued in, read from its claims. Pure.

A service-account token is a JWT signed by the kube-apiserver of the tenant partition that owns
the service account's namespace, and only that partition can review it: its issuer
(`--service-account-issuer`) is that partition's, and the review looks the service account up
(by namespace, name and uid) in that partition's storage. So a TokenReview, the client's
(`POST /apis/authentication.k8s.io/v1/tokenreviews`) or the proxy's own (proxy/authn.py), goes to
the partition owning the namespace named in the token's claims.

The claims are read, never verified: they only pick the partition that verifies the whole token.
A token whose claims name no service account (an OIDC token, a bootstrap token, a forged or
undecodable one) is reviewed where it would be without this module.

Claims read (k8s.io/kubernetes pkg/serviceaccount/claims.go and legacy.go): the bound token's
`kubernetes.io.namespace`; the legacy Secret-based token's `kubernetes.io/serviceaccount/namespace`;
else a `sub` of `system:serviceaccount:<namespace>:<name>`.
"""

from __future__ import annotations

import base64
import binascii

import orjson

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
# bytes; a JWT payload longer than this is not a Kubernetes service-account token (those are
# under 2 KiB: a handful of claims) and is not decoded. Bounds the work a hostile token costs.
MAX_PAYLOAD_BYTES = 16 * 1024


def service_account_namespace(token: str) -> str:
    """The namespace a service-account JWT names in its claims, "" when `token` is not a JWT or
    names no service account. Never raises."""
    parts = token.split(".")
    if len(parts) != 3 or len(parts[1]) > MAX_PAYLOAD_BYTES:
        return ""
    payload = parts[1]
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return ""
    if not isinstance(claims, dict):
        return ""
    bound = claims.get("kubernetes.io")
    namespace = bound.get("namespace") if isinstance(bound, dict) else None
    if isinstance(namespace, str) and namespace:
        return namespace
    legacy = claims.get("kubernetes.io/serviceaccount/namespace")
    if isinstance(legacy, str) and legacy:
        return legacy
    subject = claims.get("sub")
    if isinstance(subject, str) and subject.startswith(SERVICE_ACCOUNT_PREFIX):
        owner, sep, name = subject[len(SERVICE_ACCOUNT_PREFIX):].partition(":")
        if sep and owner and name:
            return owner
    return ""
