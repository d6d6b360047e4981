"""Byte-level rewriting of resourceVersions in compact JSON (responses and request bodies).

kube-apiserver writes compact JSON, so every resourceVersion field appears as the bytes
`"resourceVersion":"<digits>"`. A string value that merely contains those characters is escaped
(`\\"resourceVersion\\"`) and never matches, so a regular expression over the bytes finds
exactly the JSON keys named resourceVersion, at any depth (object metadata, Table rows, list
metadata, references such as an Event's involvedObject). Rewriting bytes avoids decoding and
re-encoding whole objects on the hot path (DESIGN §9).
"""

from __future__ import annotations

import re
from collections.abc import Callable

_RV_FIELD = re.compile(rb'"resourceVersion":"(\d+)"')


def rewrite_rvs(body: bytes, translate: Callable[[bytes], bytes | None]) -> bytes:
    """Replace the value of every `"resourceVersion":"<digits>"` with `translate(digits)`.

    `translate` returns the new digits, or None to keep the value as it is.
    """

    def sub(match: re.Match[bytes]) -> bytes:
        new = translate(match.group(1))
        if new is None:
            return match.group(0)
        return b'"resourceVersion":"' + new + b'"'

    return _RV_FIELD.sub(sub, body)


def set_all_rvs(body: bytes, rv: bytes) -> bytes:
    """Set every resourceVersion field in `body` to `rv` (a watch event stamped with its vector)."""
    field = b'"resourceVersion":"' + rv + b'"'
    return _RV_FIELD.sub(lambda _: field, body)
