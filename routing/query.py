"""Query strings and query parameters of API requests. Pure.

The proxy rewrites queries by replacing or removing whole parameters and leaves every other
parameter exactly as the client sent it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode

# seconds; a watch without timeoutSeconds lives a random time in [1800, 3600), as kube-apiserver
# picks from --min-request-timeout (k8s.io/apiserver/pkg/endpoints/handlers/get.go).
DEFAULT_WATCH_SECONDS = (1800.0, 3600.0)


def translated_query(query_string: str, *, replace: Mapping[str, str | None]) -> str:
    """The query with some parameters replaced (value) or removed (None); others untouched."""
    pairs = [(k, v) for k, v in parse_qsl(query_string, keep_blank_values=True) if k not in replace]
    pairs += [(k, v) for k, v in replace.items() if v is not None]
    return urlencode(pairs)


def is_malformed_rv(rv: str) -> bool:
    """Not empty and not digits at all (kube-apiserver answers some of these 500). Digits that
    are no RV of the proxy's (too long, leading zeros: an RV of its old 143-bit encoding) are
    too old instead: 410, so informers relist."""
    return bool(rv) and not (rv.isascii() and rv.isdigit())


def watch_lifetime(query: Mapping[str, str], *, choose: float | None = None) -> float:
    """How long a watch served by the proxy lives (seconds): its timeoutSeconds, else a random
    time in DEFAULT_WATCH_SECONDS (`choose`, in [0, 1), picks it for tests)."""
    value = query.get("timeoutSeconds", "")
    if value.isdigit():
        return float(value)
    low, high = DEFAULT_WATCH_SECONDS
    return low + (high - low) * (random.random() if choose is None else choose)


def refused_watch_options(query: Mapping[str, str]) -> bool:
    """True when kube-apiserver answers this watch's sendInitialEvents / resourceVersionMatch
    with 422 Invalid (apimachinery pkg/apis/meta/internalversion/validation validateWatchOptions,
    the WatchList feature on): sendInitialEvents, true or false, needs
    resourceVersionMatch=NotOlderThan, and resourceVersionMatch needs sendInitialEvents, is
    NotOlderThan only and never comes with continue."""
    sent = "sendInitialEvents" in query
    match = query.get("resourceVersionMatch", "")
    if sent and match != "NotOlderThan":
        return True
    return bool(match) and (not sent or match != "NotOlderThan" or bool(query.get("continue")))
