"""Errors of the upstream client layer, the proxy's own types (kopf's `clients/errors.py` is the
model): callers never see aiohttp's exceptions.

    UpstreamError                   something went wrong talking to a partition
    ├── PartitionUnavailable        the partition cannot be used now: answer 503 + Retry-After
    │   ├── PartitionMarkedDown     its circuit breaker is open (no request was sent)
    │   ├── PartitionUnreachable    connection refused, reset or broken, TLS failure
    │   └── PartitionTimedOut       no answer within the deadline of the request's class
    ├── StreamBroken                an answer's body ended early or went silent (mid-stream)
    └── APIError                    the partition answered with a non-2xx Status
        ├── APIBadRequest (400)     ├── APINotFound (404)    ├── APIExpired (410 Expired/Gone)
        ├── APIUnauthorized (401)   ├── APIConflict (409)    ├── APITooManyRequests (429)
        ├── APIForbidden (403)      └── APIServerError (5xx)

An `APIError` carries the Status body as the partition sent it (or one made from the code when
the body is not a Status), so a caller can pass it on unchanged. Forwarded requests and unions
do not raise APIError: a partition's answer, whatever its code, is the client's answer; only the
proxy's own calls (reflectors, reviews, the resourceVersion table, discovery) use it.
"""

from __future__ import annotations

from typing import Any

import orjson


class UpstreamError(Exception):
    """Base of every error of the client layer; `partition` names the partition."""

    def __init__(self, partition: str, message: str) -> None:
        super().__init__(f"{partition}: {message}")
        self.partition = partition


class PartitionUnavailable(UpstreamError):
    """The partition cannot be used now. `why` is a short reason for the client's 503 Status;
    `retry_after` the whole seconds until it may be tried again (>= 1)."""

    def __init__(self, partition: str, why: str, retry_after: int) -> None:
        super().__init__(partition, why)
        self.why = why
        self.retry_after = retry_after


class PartitionMarkedDown(PartitionUnavailable):
    """Its circuit breaker is open, or its half-open trial is taken: nothing was sent.
    `reopens_in`: seconds until the breaker's window ends (0 when only the trial is taken); a
    background reader retries then, so one of them makes the trial as soon as it is due."""

    def __init__(self, partition: str, why: str, retry_after: int, reopens_in: float = 0.0) -> None:
        super().__init__(partition, why, retry_after)
        self.reopens_in = reopens_in


class PartitionUnreachable(PartitionUnavailable):
    """The connection could not be made, or broke before the answer's headers."""


class PartitionTimedOut(PartitionUnavailable):
    """No answer within the deadline of the request's class."""


class StreamBroken(UpstreamError):
    """A body being read ended early (connection reset, malformed chunking) or sent no byte for
    longer than the inactivity timeout of its class."""


class APIError(UpstreamError):
    """A non-2xx answer. `status` is the metav1.Status as the partition sent it (or made from
    the code), `code` its HTTP code, `reason` its StatusReason, `body` the raw bytes."""

    def __init__(self, partition: str, code: int, status: dict[str, Any], body: bytes) -> None:
        self.code = code
        self.status = status
        self.reason = str(status.get("reason", ""))
        self.body = body
        super().__init__(partition, f"{code} {self.reason}: {status.get('message', '')}")


class APIBadRequest(APIError):
    pass


class APIUnauthorized(APIError):
    pass


class APIForbidden(APIError):
    pass


class APINotFound(APIError):
    pass


class APIConflict(APIError):
    pass


class APIExpired(APIError):
    """410: the resourceVersion asked for is gone (reason Expired, or the legacy Gone)."""


class APITooManyRequests(APIError):
    pass


class APIServerError(APIError):
    pass


_BY_CODE: dict[int, type[APIError]] = {
    400: APIBadRequest,
    401: APIUnauthorized,
    403: APIForbidden,
    404: APINotFound,
    409: APIConflict,
    410: APIExpired,
    429: APITooManyRequests,
}


def api_error(partition: str, code: int, body: bytes) -> APIError:
    """The APIError for a non-2xx answer: its Status when the body is one, else a Status made
    from the code (`InternalError` for 5xx, `Unknown` otherwise, as client-go's
    `errors.NewGenericServerResponse` does)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict) or doc.get("kind") != "Status":
        reason = "InternalError" if code >= 500 else "Unknown"
        doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
               "message": body[:200].decode(errors="replace")}
    cls = _BY_CODE.get(code, APIServerError if code >= 500 else APIError)
    return cls(partition, code, doc, body)
