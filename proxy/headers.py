"""Which request and response headers cross the proxy.

Hop-by-hop headers (RFC 9110 §7.6.1) never cross. Identity headers a client sends
(`Authorization`, `Impersonate-*`, `X-Remote-*`) are always stripped before the proxy adds its
own: a client cannot choose who it is upstream.
"""

from __future__ import annotations

from multidict import CIMultiDict, CIMultiDictProxy

HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
    )
)
_IDENTITY_PREFIXES = ("impersonate-", "x-remote-")
# Recomputed by aiohttp for the new message.
_RECOMPUTED = frozenset({"host", "content-length"})


def _connection_tokens(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> set[str]:
    return {t.strip().lower() for v in headers.getall("Connection", []) for t in v.split(",")}


def upstream_request_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The client's headers minus hop-by-hop, identity and recomputed ones."""
    drop = HOP_BY_HOP | _RECOMPUTED | _connection_tokens(headers)
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in headers.items():
        lower = key.lower()
        if lower in drop or lower == "authorization" or lower.startswith(_IDENTITY_PREFIXES):
            continue
        out.add(key, value)
    return out


def downstream_response_headers(headers: CIMultiDictProxy[str] | CIMultiDict[str], *, keep_length: bool) -> CIMultiDict[str]:
    """An upstream response's headers to send to the client."""
    drop = HOP_BY_HOP | _connection_tokens(headers)
    if not keep_length:
        drop = drop | {"content-length"}
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in headers.items():
        if key.lower() not in drop:
            out.add(key, value)
    return out


def union_accept(accept: str) -> str | None:
    """The Accept header a union sends every partition: the client's, without CBOR (answered
    as by a kube-apiserver without it: `routing.translate`) and without protobuf Tables (the
    union merges lists and PartialObjectMetadataLists in protobuf, Tables in JSON). None when the
    client accepts only CBOR (406). client-go lists application/json as a fallback after
    protobuf, so what remains is always acceptable to it."""
    if not accept.strip():
        return "application/json"
    parts = [p.strip() for p in accept.split(",") if p.strip()]
    kept = [p for p in parts if not _is_cbor(p) and not (p.lower().startswith("application/vnd.kubernetes.protobuf") and "as=table" in p.lower().replace(" ", ""))]
    if not kept:
        return None if all(_is_cbor(p) for p in parts) else "application/json"
    return ", ".join(kept)


def _is_cbor(media: str) -> bool:
    return media.split(";", 1)[0].strip().lower() in {"application/cbor", "application/cbor-seq", "application/apply-patch+cbor"}
