"""Discovery and OpenAPI documents merged over the tenant partitions. Pure: no I/O
(proxy/handlers/discovery_merge.py fetches and answers).

Every partition runs the same kube-apiserver build, so their documents differ only by what was
added to one of them: a CRD made straight in a TP, an aggregated API. A client of the proxy must
discover those too (`kubectl api-resources`, then `kubectl get widgets -n <a tp2 tenant>`), so:
- MERGED documents are the union, the system partition's first, in its order, then what only
  other partitions serve, in partition order: aggregated discovery (`/apis` as
  APIGroupDiscoveryList, KEP-3352), legacy `/apis` (APIGroupList), the OpenAPI v3 index
  (`/openapi/v3`) and OpenAPI v2 (`/openapi/v2` in JSON: paths and definitions);
- FALLBACK documents are one partition's: the system partition's, or, when it answers 404, the
  first other TP that serves it (`/apis/<group>/<version>`, `/openapi/v3/apis/<group>/<version>`).
A merged answer carries an ETag computed over its bytes and answers `If-None-Match` with 304, as
kube-apiserver does for discovery and OpenAPI (k8s.io/apiserver/pkg/endpoints/discovery/aggregated
and k8s.io/kube-openapi/pkg/handler3: a quoted hex digest of the document).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from typing import Any

# Aggregated discovery (KEP-3352) in JSON: what the proxy asks the partitions for when a client
# accepts it (kubectl lists protobuf first and JSON second; the merge is done in JSON).
AGGREGATED_JSON = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


class Document(enum.Enum):
    AGGREGATED = "aggregated"  # /apis, Accept names APIGroupDiscoveryList
    GROUP_LIST = "group-list"  # /apis, legacy APIGroupList
    OPENAPI_V3_INDEX = "openapi-v3-index"  # /openapi/v3
    OPENAPI_V2 = "openapi-v2"  # /openapi/v2 in JSON
    FALLBACK = "fallback"  # one partition's document (see the module docstring)


def document_of(path: str, accept: str) -> Document | None:
    """Which discovery document a GET of `path` (partition prefix removed) with `accept` is,
    None when it is none the proxy merges (the system partition answers it alone)."""
    path = path.rstrip("/") or "/"
    if path == "/apis":
        return Document.AGGREGATED if "as=APIGroupDiscoveryList" in accept else Document.GROUP_LIST
    if path == "/openapi/v3":
        return Document.OPENAPI_V3_INDEX
    if path == "/openapi/v2":
        return None if "protobuf" in accept else Document.OPENAPI_V2
    parts = path.split("/")
    if len(parts) == 4 and parts[1] == "apis":  # /apis/<group>/<version>
        return Document.FALLBACK
    if len(parts) == 6 and parts[1:4] == ["openapi", "v3", "apis"]:  # /openapi/v3/apis/<group>/<version>
        return Document.FALLBACK
    return None


def etag_of(body: bytes) -> str:
    """The ETag of a merged document: a quoted hex SHA-256 of its bytes."""
    return '"' + hashlib.sha256(body).hexdigest().upper() + '"'


def merge(kind: Document, docs: Sequence[Any]) -> Any:
    """The union of `docs` (parsed JSON, the system partition's first). Raises ValueError for a
    document of the wrong shape."""
    if not docs or not all(isinstance(d, dict) for d in docs):
        raise ValueError("not discovery documents")
    if kind is Document.AGGREGATED:
        return _merge_aggregated(docs)
    if kind is Document.GROUP_LIST:
        return _merge_group_list(docs)
    if kind is Document.OPENAPI_V3_INDEX:
        return _merge_keys(docs, ("paths",))
    if kind is Document.OPENAPI_V2:
        return _merge_keys(docs, ("paths", "definitions"))
    raise ValueError(f"{kind.value} documents are not merged")


def _by(items: list[Any], key: Any) -> dict[Any, Any]:
    return {key(i): i for i in items if isinstance(i, dict)}


def _merge_aggregated(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out = dict(docs[0])
    groups: list[dict[str, Any]] = [dict(g, versions=[dict(v, resources=list(v.get("resources") or ())) for v in g.get("versions") or ()])
                                    for g in docs[0].get("items") or ()]
    by_name = _by(groups, lambda g: (g.get("metadata") or {}).get("name", ""))
    for doc in docs[1:]:
        for group in doc.get("items") or ():
            name = (group.get("metadata") or {}).get("name", "")
            mine = by_name.get(name)
            if mine is None:
                groups.append(group)
                by_name[name] = group
                continue
            versions = _by(mine["versions"], lambda v: v.get("version"))
            for version in group.get("versions") or ():
                have = versions.get(version.get("version"))
                if have is None:
                    mine["versions"].append(version)
                    continue
                names = {r.get("resource") for r in have["resources"]}
                have["resources"] += [r for r in version.get("resources") or () if r.get("resource") not in names]
    out["items"] = groups
    return out


def _merge_group_list(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out = dict(docs[0])
    groups = [dict(g, versions=list(g.get("versions") or ())) for g in docs[0].get("groups") or ()]
    by_name = _by(groups, lambda g: g.get("name"))
    for doc in docs[1:]:
        for group in doc.get("groups") or ():
            mine = by_name.get(group.get("name"))
            if mine is None:
                groups.append(group)
                by_name[group.get("name")] = group
                continue
            known = {v.get("groupVersion") for v in mine["versions"]}
            mine["versions"] += [v for v in group.get("versions") or () if v.get("groupVersion") not in known]
    out["groups"] = groups
    return out


def _merge_keys(docs: Sequence[dict[str, Any]], sections: tuple[str, ...]) -> dict[str, Any]:
    out = dict(docs[0])
    for section in sections:
        merged = dict(docs[0].get(section) or {})
        for doc in docs[1:]:
            for key, value in (doc.get(section) or {}).items():
                merged.setdefault(key, value)
        out[section] = merged
    return out
