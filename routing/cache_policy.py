"""Whether a request may be answered from a watch cache, and how. Pure.

Like the apiserver cacher's `shouldDelegateList` / watch path (k8s.io/apiserver/pkg/storage/
cacher/delegator.go), a request is served from the cache only when the answer would be one
kube-apiserver could give:
- the resource (and namespace, for a namespace-restricted cache) is the cache's;
- the client accepts plain JSON objects (no Table or PartialObjectMetadata conversion);
- its label selector is at least as narrow as the cache's and its field selector uses only
  fields the cache indexes and is at least as narrow as the cache's;
- its resourceVersion semantics allow it: a LIST with RV=0, or NotOlderThan a proxy RV
  (legacy: RV=N without resourceVersionMatch and without limit); a WATCH from "", "0" or a
  proxy RV; sendInitialEvents=true with resourceVersionMatch=NotOlderThan; a GET by name with RV=0. A consistent LIST (RV unset),
  `resourceVersionMatch=Exact` and `continue` pages go upstream.
Whether the cache has reached (or still holds) a given RV is decided where the cache lives.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from routing import rv as rvcodec
from routing.query import refused_watch_options
from routing.requestinfo import RequestInfo
from routing.selectors import (
    SELECTABLE_FIELDS,
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)

_TRUE = {"true", "1"}


class CacheMode(enum.Enum):
    LIST = "list"
    WATCH = "watch"
    GET = "get"


@dataclass(frozen=True, slots=True)
class CacheSpec:
    """What the policy needs of a cache: its resource, namespace and selectors."""

    group: str
    resource: str
    namespace: str
    label_selector: LabelSelector
    field_selector: FieldSelector
    codec: rvcodec.RVCodec  # the cache's RV space, to decode clients' RVs


@dataclass(frozen=True, slots=True)
class CachePlan:
    """How to answer from the cache. `vector` is the client's RV decoded (None for ""/"0")."""

    mode: CacheMode
    label_selector: LabelSelector
    field_selector: FieldSelector
    namespace: str
    vector: tuple[int, ...] | None
    send_initial_events: bool
    bookmarks: bool
    name: str  # the one name selected (GET, or metadata.name=), "" for any


def accepts_plain_json(accept: str) -> bool:
    """True when the Accept header lets the answer be plain JSON objects."""
    if not accept.strip():
        return True
    for part in accept.split(","):
        media = part.strip()
        if "as=" in media:
            continue
        kind = media.split(";", 1)[0].strip()
        if kind in {"application/json", "*/*", "application/*"}:
            return True
    return False


def prefers_protobuf(accept: str) -> bool:
    """True when the first media range of the Accept header is plain protobuf objects
    (`application/vnd.kubernetes.protobuf`, no `as=` conversion), as client-go sends for
    kubelets and control-plane components: kube-apiserver answers them protobuf (the first
    media type it can serve, apiserver pkg/endpoints/handlers/negotiation)."""
    first = accept.split(",", 1)[0].strip()
    return "as=" not in first and first.split(";", 1)[0].strip() == "application/vnd.kubernetes.protobuf"


def is_consistent_read(info: RequestInfo, query: Mapping[str, str]) -> bool:
    """A GET without resourceVersion=0 or a LIST without a resourceVersion: a read of the
    partition's current state, which the partitions answer, never a watch cache (`_cache_mode`:
    the proxy cannot confirm that its cache is as fresh as the partition, as kube-apiserver's
    cacher does since KEP-2340). The dispatcher asks this before looking for a cache: most
    routed GETs are such reads."""
    verb = info.verb
    if verb == "get":
        return query.get("resourceVersion", "") != "0"
    return verb == "list" and not query.get("resourceVersion", "")


def plan(info: RequestInfo, query: Mapping[str, str], accept: str, spec: CacheSpec) -> CachePlan | None:
    """The way to serve `info` from the cache `spec`, or None to go upstream."""
    if not info.is_resource_request or info.malformed or info.subresource:
        return None
    if (info.api_group, info.resource) != (spec.group, spec.resource):
        return None
    if spec.namespace and info.namespace != spec.namespace:
        return None
    if is_consistent_read(info, query):
        return None  # decided before the selectors are parsed
    rv = query.get("resourceVersion", "")
    if not accepts_plain_json(accept):
        return None
    selectors = _cacheable_selectors(query, spec)
    if selectors is None:
        return None
    label_selector, field_selector = selectors

    sie = query.get("sendInitialEvents", "").lower() in _TRUE
    vector: tuple[int, ...] | None = None
    if rv not in {"", "0"}:
        try:
            vector = spec.codec.decode(rv)
        except rvcodec.RVError:
            return None  # the partitions (or the proxy's union) answer it
        if not spec.codec.is_vector_form(rv) and not spec.codec.is_complete(vector):
            return None  # one object's RV, not a position: the union answers it

    mode = _cache_mode(info, query, send_initial_events=sie, vector=vector)
    if mode is None:
        return None
    return CachePlan(
        mode=mode,
        label_selector=label_selector,
        field_selector=field_selector,
        namespace=info.namespace,
        vector=vector,
        send_initial_events=sie,
        bookmarks=query.get("allowWatchBookmarks", "").lower() in _TRUE,
        name=info.name or _selected_name(field_selector),
    )


def _cacheable_selectors(query: Mapping[str, str], spec: CacheSpec) -> tuple[LabelSelector, FieldSelector] | None:
    """The request's labelSelector and fieldSelector, parsed, when the cache `spec` can answer
    them: the field selector uses only fields the cache indexes (SELECTABLE_FIELDS, else
    metadata.name and metadata.namespace) and both are at least as narrow as the cache's.
    None otherwise, or when one does not parse (the partition answers with its own Status)."""
    try:
        label_selector = parse_label_selector(query.get("labelSelector", ""))
        field_selector = parse_field_selector(query.get("fieldSelector", ""))
    except SelectorError:
        return None
    allowed = SELECTABLE_FIELDS.get((spec.group, spec.resource), frozenset({"metadata.name", "metadata.namespace"}))
    if not field_selector.fields() <= allowed:
        return None
    if not label_selector.at_least_as_narrow_as(spec.label_selector):
        return None
    if not field_selector.at_least_as_narrow_as(spec.field_selector):
        return None
    return label_selector, field_selector


def _cache_mode(info: RequestInfo, query: Mapping[str, str], *, send_initial_events: bool,
                vector: tuple[int, ...] | None) -> CacheMode | None:
    """How a watch cache may answer the request's verb with its resourceVersion semantics
    (resourceVersion, resourceVersionMatch, sendInitialEvents, limit, continue; see the module
    docstring), None when only the partitions may. `vector`: the resourceVersion decoded, None
    for "" and "0"."""
    rv = query.get("resourceVersion", "")
    rvm = query.get("resourceVersionMatch", "")
    if info.verb == "watch":
        if query.get("continue") or query.get("limit"):
            return None
        if refused_watch_options(query):
            return None  # the partitions answer their 422 (proxy.handlers.union_watch)
        if "sendInitialEvents" in query and not send_initial_events:
            return None  # valid (with NotOlderThan) and rare: the partitions answer it
        return CacheMode.WATCH
    if info.verb == "list":
        if query.get("continue") or rvm == "Exact" or send_initial_events:
            return None
        if rv == "":
            return None  # consistent read: the partitions answer
        if vector is not None and not rvm and query.get("limit"):
            return None  # legacy RV=N with limit means Exact
        return CacheMode.LIST
    if info.verb == "get" and info.name:
        return CacheMode.GET if rv == "0" else None
    return None


def _selected_name(field_selector: FieldSelector) -> str:
    for req in field_selector.requirements:
        if req.field == "metadata.name" and req.operator == "=":
            return req.value
    return ""


def selected_name(field_selector: str) -> str:
    """The name a raw field selector pins with `metadata.name=<n>`, "" when none or invalid."""
    try:
        return _selected_name(parse_field_selector(field_selector))
    except SelectorError:
        return ""


def choose(
    specs: Sequence[CacheSpec],
    info: RequestInfo,
    query: Mapping[str, str],
    accept: str,
    *,
    rv_space: tuple[str, ...],
    partitions: Sequence[str],
) -> Iterator[tuple[int, CachePlan]]:
    """The caches (index into `specs`, in config order) that could answer a request routed to
    `partitions` in `rv_space`, each with its plan. Whether a cache's position lets it answer
    now is decided where the cache lives (`proxy.cache.serve.can_serve`)."""
    for i, spec in enumerate(specs):
        if rv_space != spec.codec.rv_space or not set(partitions) <= set(spec.codec.space):
            continue
        found = plan(info, query, accept, spec)
        if found is not None:
            yield i, found
