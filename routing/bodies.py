"""What routing reads from a request body. Pure.

Two decisions need a body: a create whose URL has no name (`POST /api/v1/namespaces`,
`POST /api/v1/nodes`) is routed by the name in it, and a TokenReview by the namespace its
service-account token names (routing.tokens).
"""

from __future__ import annotations

from typing import Any

import orjson

from routing.protobuf import object_name, token_review_token
from routing.tokens import service_account_namespace

_PROTOBUF = "application/vnd.kubernetes.protobuf"


def _json(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def body_name(body: bytes, content_type: str) -> str:
    """metadata.name of a create body (JSON or Kubernetes protobuf), "" when absent or
    undecodable (the partition the route then picks validates the body itself)."""
    if content_type.startswith(_PROTOBUF):
        return object_name(body) or ""
    meta = _json(body).get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def body_token_namespace(body: bytes, content_type: str) -> str:
    """The namespace the service-account token of a TokenReview body (JSON or Kubernetes
    protobuf) names in its claims, "" when there is none (routing.tokens)."""
    token: object
    if content_type.startswith(_PROTOBUF):
        token = token_review_token(body)
    else:
        spec = _json(body).get("spec")
        token = spec.get("token") if isinstance(spec, dict) else None
    return service_account_namespace(token) if isinstance(token, str) and token else ""
