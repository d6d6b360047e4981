"""Kubernetes `Status` objects (metav1.Status) for errors the proxy makes itself.

Shape: {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":...,
"reason":...,"details":{...},"code":...} as kube-apiserver writes it
(`k8s.io/apimachinery/pkg/api/errors`). Reasons are the StatusReason constants clients branch on
(`Expired` for 410, never `Gone`: client-go's pager and reflector key on it).
"""

from __future__ import annotations

from typing import Any

import orjson


def status(code: int, reason: str, message: str, *, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Status object as a dict."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details or {},
        "code": code,
    }


def status_bytes(code: int, reason: str, message: str, *, details: dict[str, Any] | None = None) -> bytes:
    """A Status object encoded as compact JSON."""
    return orjson.dumps(status(code, reason, message, details=details))


def expired(message: str) -> dict[str, Any]:
    """410 Expired: the client must relist."""
    return status(410, "Expired", message)


def watch_error_event(obj: dict[str, Any]) -> bytes:
    """One watch ERROR event line carrying a Status, newline-terminated."""
    return orjson.dumps({"type": "ERROR", "object": obj}) + b"\n"
