"""resourceVersion fields in JSON and YAML bodies, of any formatting. Pure.

Answers (kube-apiserver's JSON: compact, or indented for `?pretty=true` and curl-like user
agents) are rewritten at the byte level, never decoded: `translate_natives` replaces every
native-sized value of a key named `resourceVersion`, at any depth (object metadata, list
metadata, Table rows, an Event's involvedObject, a Binding's target), and `find_values` locates
the values at given paths (a watch event's own `object.metadata.resourceVersion`) so they can be
set to the event's RV vector. Keys kube-apiserver writes are never escaped, and a key's opening
quote is never preceded by a backslash while an escaped quote inside a string always is, so
`(?<!\\\\)"resourceVersion"\\s*:` finds exactly the keys, never text inside string values.

Request bodies (a client's update, patch or DeleteOptions, in any formatting, escapes and key
order, JSON or YAML) are small and carry at most a few RVs: they are decoded, the RVs that act as
preconditions are translated (the object's own `metadata.resourceVersion`, DeleteOptions'
`preconditions.resourceVersion`, an Eviction's `deleteOptions.preconditions.resourceVersion`, a
JSON Patch op on `/metadata/resourceVersion`), and the body is encoded again as compact JSON
(valid YAML too). RVs in references (involvedObject, target) are left as the client wrote them:
they are opaque strings to kube-apiserver and come back to the client unchanged.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from routing.rv import NATIVE_LIMIT


class RVField(enum.Enum):
    """Where a resourceVersion sits in a request body."""

    OWN = "own"  # metadata.resourceVersion of the object written (an update precondition)
    PRECONDITION = "precondition"  # DeleteOptions.preconditions.resourceVersion


class BodyError(ValueError):
    """A request body that cannot be decoded in its declared media type."""


# -- answers -------------------------------------------------------------------------------

# No lookbehind for the backslash: a leading literal lets `re` search fast (8x on a pod); the
# escaped-quote case is checked in code (`_escaped`).
_RV_FIELD = re.compile(rb'"resourceVersion"\s*:\s*"(\d{1,19})"')
# Go writes ObjectMeta in struct order: name, generateName, namespace, selfLink and uid (strings)
# come before resourceVersion. The first `"metadata"` object of a typed object or watch event is
# its own, so this finds the own resourceVersion without walking tokens; `find_own_rv` checks
# the value and falls back to `find_values` for anything else (unstructured objects with sorted
# keys, Tables).
_OWN_META_RV = re.compile(
    rb'"metadata"\s*:\s*\{(?:\s*"(?:name|generateName|namespace|selfLink|uid)"\s*:\s*"(?:[^"\\]|\\.)*"\s*,)*'
    rb'\s*"resourceVersion"\s*:\s*"(\d+)"'
)
_YAML_RV_FIELD = re.compile(rb'(?m)(?<![\w.-])(resourceVersion:[ \t]*)("?)(\d{1,19})\2(?=[ \t]*(?:#.*)?$)')


def translate_natives(body: bytes, to_proxy: Callable[[int], bytes | None]) -> bytes:
    """Replace the value of every `"resourceVersion": "<native>"` (natives are below 2**64;
    "0" and larger values are left alone) with `to_proxy(native)`, or keep it when that is None."""

    def sub(match: re.Match[bytes]) -> bytes:
        native = int(match.group(1))
        new = to_proxy(native) if 0 < native < NATIVE_LIMIT and not _escaped(body, match.start()) else None
        if new is None:
            return match.group(0)
        whole = match.group(0)
        cut = match.start(1) - match.start(0)
        return whole[:cut] + new + b'"'

    return _RV_FIELD.sub(sub, body)


def _escaped(body: bytes, quote: int) -> bool:
    """Whether the quote at `quote` is escaped (then it is inside a string, not a key)."""
    return quote > 0 and body[quote - 1] == 0x5C


def translate_yaml_natives(body: bytes, to_proxy: Callable[[int], bytes | None]) -> bytes:
    """`translate_natives` for kube-apiserver's YAML answers (`resourceVersion: "205"`)."""

    def sub(match: re.Match[bytes]) -> bytes:
        native = int(match.group(3))
        new = to_proxy(native) if 0 < native < NATIVE_LIMIT else None
        if new is None:
            return match.group(0)
        return match.group(1) + b'"' + new + b'"'

    return _YAML_RV_FIELD.sub(sub, body)


def native_rvs(body: bytes) -> list[int]:
    """Every native-sized resourceVersion value in a JSON body (for tests and scanners)."""
    return [int(m.group(1)) for m in _RV_FIELD.finditer(body) if not _escaped(body, m.start())]


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)
_COLON = re.compile(rb"\s*:")

Path = Sequence[str]  # object keys, or "*" for every element of an array


def find_values(body: bytes, paths: Sequence[Path], *, limit: int = 0) -> list[tuple[int, int]]:
    """Spans (start, end) of the string values (without their quotes) at any of `paths`, in
    document order; stops after `limit` spans (0: no limit). Walks tokens only as far as it
    must: a watch event's `object.metadata.resourceVersion` is found within its first few
    dozen tokens. Non-string values at a path are skipped. Keys are compared as raw bytes
    (kube-apiserver never escapes them)."""
    wanted = [tuple(p.encode() for p in path) for path in paths]
    found: list[tuple[int, int]] = []
    # frame: [is_object, matched path prefixes (indices into wanted still alive at this depth), key]
    stack: list[tuple[bool, list[int], list[bytes]]] = []
    depth = 0
    alive_root = list(range(len(wanted)))
    for match in _TOKEN.finditer(body):
        token = match.group(0)
        first = token[0]
        if first == 0x22:  # a string: a key or a value
            if stack and stack[-1][0] and _COLON.match(body, match.end()):
                stack[-1][2][0] = token[1:-1]
                continue
            alive = _child_paths(stack, wanted, depth) if stack else []
            for i in alive:
                if len(wanted[i]) == depth:
                    found.append((match.start() + 1, match.end() - 1))
                    if limit and len(found) >= limit:
                        return found
                    break
            continue
        if first in (0x7B, 0x5B):  # { or [
            alive = _child_paths(stack, wanted, depth) if stack else alive_root
            alive = [i for i in alive if len(wanted[i]) > depth]
            stack.append((first == 0x7B, alive, [b""]))
            depth += 1
            continue
        if stack:  # } or ]
            stack.pop()
            depth -= 1
            if not stack:
                break
    return found


def _child_paths(stack: list[tuple[bool, list[int], list[bytes]]], wanted: list[tuple[bytes, ...]], depth: int) -> list[int]:
    """The paths still alive for a value inside the innermost container at `depth`."""
    is_object, alive, key = stack[-1]
    step = key[0] if is_object else b"*"
    return [i for i in alive if len(wanted[i]) >= depth and wanted[i][depth - 1] == step]


def find_own_rv(body: bytes, path: Path, expected: str | None) -> tuple[int, int] | None:
    """The span of the value at `path` (which ends in metadata.resourceVersion), when it equals
    `expected` (None: any value): by `_OWN_META_RV` when the body is in Go's struct order, as
    kube-apiserver writes it, else by walking tokens. None when not found."""
    match = _OWN_META_RV.search(body)
    if match is not None and (expected is None or match.group(1) == expected.encode()) and not _escaped(body, match.start()):
        return match.start(1), match.end(1)
    spans = find_values(body, [path], limit=1)
    if spans and (expected is None or body[spans[0][0] : spans[0][1]] == expected.encode()):
        return spans[0]
    return None


def replace_spans(body: bytes, spans: Sequence[tuple[int, int]], value: bytes) -> bytes:
    """`body` with each span (from `find_values`, in document order) replaced by `value`."""
    if not spans:
        return body
    out = []
    last = 0
    for start, end in spans:
        out.append(body[last:start])
        out.append(value)
        last = end
    out.append(body[last:])
    return b"".join(out)


# -- requests ------------------------------------------------------------------------------

# Proxy RVs are at least 2**64: 20 digits or more. A body without such a run carries none, and
# unless some resourceVersion in it is not digits at all (the caller refuses those with 400) it
# goes to the partition byte for byte.
_SUSPECT = re.compile(rb"""\d{20}|resourceVersion["']?\s*:\s*["']?[^\s"',}]*[^\d\s"',}]""")

RequestFn = Callable[[RVField, str], str | None]


def might_carry_proxy_rvs(body: bytes) -> bool:
    """Whether a request body may hold an RV `translate_request` has to look at: a proxy-sized
    number, or a resourceVersion value that is not a number."""
    return _SUSPECT.search(body) is not None


def translate_request(body: bytes, *, yaml_body: bool, delete_options: bool, fn: RequestFn) -> bytes:
    """Translate the precondition RVs of a request body (see module docstring) with `fn`, which
    returns the new value or None to keep it (and may raise to refuse the request).
    `delete_options`: the body is DeleteOptions (a DELETE). Returns `body` itself when nothing
    changes. Raises BodyError for a body that does not decode (only when it might carry a
    proxy RV; otherwise the partition judges it)."""
    if not might_carry_proxy_rvs(body):
        return body
    doc = _decode(body, yaml_body=yaml_body)
    if not _translate_doc(doc, delete_options=delete_options, fn=fn):
        return body
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def _decode(body: bytes, *, yaml_body: bool) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        if not yaml_body:
            raise BodyError(f"the request body is not JSON: {exc}") from None
    try:
        return yaml.safe_load(body)
    except yaml.YAMLError as exc:
        raise BodyError(f"the request body is not YAML: {str(exc).splitlines()[0]}") from None


def _translate_doc(doc: Any, *, delete_options: bool, fn: RequestFn) -> bool:
    changed = False
    if isinstance(doc, list):  # RFC 6902 JSON Patch
        for op in doc:
            if (
                isinstance(op, dict)
                and op.get("path") == "/metadata/resourceVersion"
                and op.get("op") in ("test", "add", "replace")
                and isinstance(op.get("value"), (str, int))
            ):
                changed |= _apply(op, "value", RVField.OWN, fn)
        return changed
    if not isinstance(doc, dict):
        return False
    if delete_options or doc.get("kind") == "DeleteOptions":
        return _preconditions(doc, fn)
    meta = doc.get("metadata")
    if isinstance(meta, dict):
        changed |= _apply(meta, "resourceVersion", RVField.OWN, fn)
    if doc.get("kind") == "Eviction" and isinstance(doc.get("deleteOptions"), dict):
        changed |= _preconditions(doc["deleteOptions"], fn)
    return changed


def _preconditions(options: dict[str, Any], fn: RequestFn) -> bool:
    pre = options.get("preconditions")
    return isinstance(pre, dict) and _apply(pre, "resourceVersion", RVField.PRECONDITION, fn)


def _apply(holder: dict[str, Any], key: str, where: RVField, fn: RequestFn) -> bool:
    value = holder.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # YAML without quotes: kube-apiserver would refuse the type anyway
    if not isinstance(value, str):
        return False
    new = fn(where, value)
    if new is None or new == value:
        return False
    holder[key] = new
    return True
