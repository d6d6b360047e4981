"""Review requests the proxy sends with its own credential: TokenReview (authentication) and
SubjectAccessReview (authorization)."""

from __future__ import annotations

from typing import Any

from proxy.clients.errors import UpstreamError
from proxy.clients.partition import PartitionClient


class ReviewError(Exception):
    """A review request got no usable answer (one-line reason)."""


async def post_review(client: PartitionClient, path: str, review: dict[str, Any]) -> dict[str, Any]:
    """POST a review object; return its `status`. Raises ReviewError when the partition cannot
    be asked, refuses, or answers something that is not a review."""
    try:
        doc = await client.send_json("POST", path, review)
    except UpstreamError as exc:
        raise ReviewError(f"{review['kind']} on {client.name} failed: {exc}") from None
    except ValueError:
        raise ReviewError(f"{review['kind']} on {client.name} answered something that is not JSON") from None
    status = doc.get("status") if isinstance(doc, dict) else None
    return status if isinstance(status, dict) else {}
