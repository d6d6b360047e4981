"""Every Status answer the proxy makes itself, worded as kube-apiserver words them
(`k8s.io/apimachinery/pkg/api/errors`, `k8s.io/apiserver/pkg/endpoints/handlers/negotiation`,
`.../handlers/responsewriters`). The Status objects are built by `routing.status`; this module
turns them into the pipeline's `Answer`. Nothing else builds an error answer.
"""

from __future__ import annotations

from multidict import CIMultiDict

from proxy.clients.errors import PartitionUnavailable
from proxy.identity import Identity
from proxy.messages import Answer
from routing.requestinfo import RequestInfo
from routing.status import expired, status_bytes
from routing.translate import SERVED_MEDIA_TYPES
import orjson


def status_answer(code: int, reason: str, message: str, *, details: dict[str, str] | None = None,
                  headers: dict[str, str] | None = None) -> Answer:
    """A Status made by the proxy itself."""
    return Answer(code, status_bytes(code, reason, message, details=details), CIMultiDict(headers) if headers else None)


def plain_not_found() -> Answer:
    """Go's `404 page not found` in plain text: what kube-apiserver answers a path it does not
    serve at all (an unknown partition prefix gets the same)."""
    return Answer(404, b"404 page not found\n", content_type="text/plain; charset=utf-8")


def plain_text(code: int, text: str) -> Answer:
    return Answer(code, text.encode() + b"\n", content_type="text/plain; charset=utf-8")


def expired_answer(message: str) -> Answer:
    """410 Expired: the client relists (client-go keys on the reason, not the code)."""
    return Answer(410, orjson.dumps(expired(message)))


def unavailable_answer(partition: str, why: str, retry_after: int) -> Answer:
    """503 ServiceUnavailable with an integer Retry-After (client-go retries such answers up
    to 10 times, waiting that long: k8s.io/client-go/rest/with_retry.go)."""
    return status_answer(503, "ServiceUnavailable", f"partition {partition} is unavailable: {why}",
                         headers={"Retry-After": str(retry_after)})


def partition_unavailable(exc: PartitionUnavailable) -> Answer:
    """The 503 for a partition the client layer could not use."""
    return unavailable_answer(exc.partition, exc.why, exc.retry_after)


def too_many_requests(message: str) -> Answer:
    """429 with an integer Retry-After (client-go waits and retries by itself)."""
    return status_answer(429, "TooManyRequests", message, headers={"Retry-After": "1"})


def unauthorized() -> Answer:
    return status_answer(401, "Unauthorized", "Unauthorized")


def request_too_large() -> Answer:
    return status_answer(413, "RequestEntityTooLarge", "the request body is too large")


def _qualified(info: RequestInfo) -> str:
    return f"{info.resource}.{info.api_group}" if info.api_group else info.resource


def forbidden(identity: Identity, info: RequestInfo, reason: str = "") -> Answer:
    """403 as kube-apiserver words a denied request (responsewriters.Forbidden)."""
    scope = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    what = f'{info.resource} "{info.name}"' if info.name else info.resource
    message = (
        f'{what} is forbidden: User "{identity.user}" cannot {info.verb} resource "{info.resource}" '
        f'in API group "{info.api_group}" {scope}'
    )
    if reason:
        message += f": {reason}"
    details = {"name": info.name, "kind": info.resource} if info.name else {"kind": info.resource}
    return status_answer(403, "Forbidden", message, details=details)


def refused(identity: Identity, info: RequestInfo, reason: str, *, error: bool) -> Answer:
    """The answer to a request the partitions did not allow: 403 Forbidden, or 500 when they
    could not be asked (`error`: `authorization_error`)."""
    return authorization_error(reason) if error else forbidden(identity, info, reason)


def authorization_error(message: str) -> Answer:
    """500 InternalError: the partitions that authorize a request could not be asked (kube-apiserver's
    answer when its authorizer fails: responsewriters.InternalError, "Internal error occurred: ...")."""
    return status_answer(500, "InternalError", f"Internal error occurred: {message}")


def forbidden_message(message: str) -> Answer:
    """403 with a message already worded (a denied impersonation)."""
    return status_answer(403, "Forbidden", message)


def conflict(info: RequestInfo) -> Answer:
    """409 Conflict for a write whose resourceVersion precondition names no current position
    in the owning partition: the answer kube-apiserver gives a stale precondition
    (errors.NewConflict with the registry's OptimisticLockErrorMsg)."""
    message = (
        f'Operation cannot be fulfilled on {_qualified(info)} "{info.name}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    details = {"name": info.name, "group": info.api_group, "kind": info.resource} if info.api_group else {"name": info.name, "kind": info.resource}
    return status_answer(409, "Conflict", message, details=details)


def invalid_rv(rv: str, why: str) -> Answer:
    """400 for a resourceVersion that is no decimal integer at all, worded like kube-apiserver's
    answer to such a list (which answers a watch, get or update with it with a 500)."""
    return status_answer(400, "BadRequest", f'invalid resource version: resourceVersion: Invalid value: "{rv[:64]}": {why}')


def bad_request(message: str) -> Answer:
    return status_answer(400, "BadRequest", message)


def not_acceptable() -> Answer:
    """406 for an Accept header that allows only media types the proxy does not serve
    (negotiation.NewNotAcceptableError)."""
    representations = ", ".join((*SERVED_MEDIA_TYPES, "application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch"))
    return status_answer(406, "NotAcceptable", f"406: Not Acceptable\n\nAvailable representations: {representations}")


def unsupported_media_type(content_type: str) -> Answer:
    """415 for a request body in a media type the proxy does not read
    (negotiation.NewUnsupportedMediaTypeError)."""
    return status_answer(
        415, "UnsupportedMediaType", f'the body of the request was in an unknown format - accepted media types include: {", ".join(SERVED_MEDIA_TYPES)}'
    )


def bad_gateway(message: str) -> Answer:
    """502 for partitions whose answers cannot be merged (an InternalError Status)."""
    return status_answer(502, "InternalError", message)
