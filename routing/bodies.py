"""What routing reads from a request body. Pure.

Only one decision needs a body: a create whose URL has no name (`POST /api/v1/namespaces`,
`POST /api/v1/nodes`) is routed by the name in it.
"""

from __future__ import annotations

import orjson

from routing.protobuf import object_name


def body_name(body: bytes, content_type: str) -> str:
    """metadata.name of a create body (JSON or Kubernetes protobuf), "" when absent or
    undecodable (the partition the route then picks validates the body itself)."""
    if content_type.startswith("application/vnd.kubernetes.protobuf"):
        return object_name(body) or ""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""
