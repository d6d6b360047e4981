"""Status answers the proxy makes itself, worded as kube-apiserver words them
(`k8s.io/apimachinery/pkg/api/errors`, `k8s.io/apiserver/pkg/endpoints/handlers/negotiation`).
The Status objects themselves are built by `routing.status`."""

from __future__ import annotations

from aiohttp import web

from routing.requestinfo import RequestInfo
from routing.status import expired, status
from routing.translate import SERVED_MEDIA_TYPES


def status_response(code: int, reason: str, message: str, *, headers: dict[str, str] | None = None) -> web.Response:
    """A Status answer made by the proxy itself."""
    return web.json_response(status(code, reason, message), status=code, headers=headers)


def expired_response(message: str) -> web.Response:
    """410 Expired: the client relists (client-go keys on the reason, not the code)."""
    return web.json_response(expired(message), status=410)


def unavailable_response(partition: str, why: str, retry_after: int) -> web.Response:
    """503 ServiceUnavailable with an integer Retry-After (client-go retries such answers up
    to 10 times, waiting that long: k8s.io/client-go/rest/with_retry.go)."""
    return status_response(
        503, "ServiceUnavailable", f"partition {partition} is unavailable: {why}", headers={"Retry-After": str(retry_after)}
    )


def _qualified(info: RequestInfo) -> str:
    return f"{info.resource}.{info.api_group}" if info.api_group else info.resource


def conflict_response(info: RequestInfo) -> web.Response:
    """409 Conflict for a write whose resourceVersion precondition names no current position
    in the owning partition: the answer kube-apiserver gives a stale precondition
    (errors.NewConflict with the registry's OptimisticLockErrorMsg)."""
    message = (
        f'Operation cannot be fulfilled on {_qualified(info)} "{info.name}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    details = {"name": info.name, "group": info.api_group, "kind": info.resource} if info.api_group else {"name": info.name, "kind": info.resource}
    return web.json_response(status(409, "Conflict", message, details=details), status=409)


def invalid_rv_response(rv: str, why: str) -> web.Response:
    """400 for a resourceVersion that is no decimal integer at all, worded like kube-apiserver's
    answer to such a list (which answers a watch, get or update with it with a 500)."""
    return status_response(400, "BadRequest", f'invalid resource version: resourceVersion: Invalid value: "{rv[:64]}": {why}')


def not_acceptable_response() -> web.Response:
    """406 for an Accept header that allows only media types the proxy does not serve
    (negotiation.NewNotAcceptableError)."""
    representations = ", ".join((*SERVED_MEDIA_TYPES, "application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch"))
    return status_response(406, "NotAcceptable", f"406: Not Acceptable\n\nAvailable representations: {representations}")


def unsupported_media_type_response(content_type: str) -> web.Response:
    """415 for a request body in a media type the proxy does not read
    (negotiation.NewUnsupportedMediaTypeError)."""
    return status_response(
        415, "UnsupportedMediaType", f'the body of the request was in an unknown format - accepted media types include: {", ".join(SERVED_MEDIA_TYPES)}'
    )
