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


def body_facts(body: bytes, content_type: str) -> tuple[str, str]:
    """(`body_name`, `body_token_namespace`) of one body, a JSON body decoded once: what the
    route of a request that needs its body reads (proxy.pipeline.steps.Route)."""
    if content_type.startswith(_PROTOBUF):
        return object_name(body) or "", _namespace_of(token_review_token(body))
    doc = _json(body)
    return _name_in(doc), _namespace_of(_token_in(doc))


def body_name(body: bytes, content_type: str) -> str:
    """metadata.name of a create body (JSON or Kubernetes protobuf), "" when absent or
    undecodable (the partition the route then picks validates the body itself)."""
    if content_type.startswith(_PROTOBUF):
        return object_name(body) or ""
    return _name_in(_json(body))


def body_token_namespace(body: bytes, content_type: str) -> str:
    """The namespace the service-account token of a TokenReview body (JSON or Kubernetes
    protobuf) names in its claims, "" when there is none (routing.tokens)."""
    if content_type.startswith(_PROTOBUF):
        return _namespace_of(token_review_token(body))
    return _namespace_of(_token_in(_json(body)))


def _name_in(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _token_in(doc: dict[str, Any]) -> object:
    spec = doc.get("spec")
    return spec.get("token") if isinstance(spec, dict) else None


def _namespace_of(token: object) -> str:
    return service_account_namespace(token) if isinstance(token, str) and token else ""
