"""Which request and response headers cross the proxy.

Hop-by-hop headers (RFC 9110 §7.6.1) never cross. Identity headers a client sends
(`Authorization`, `Impersonate-*`, `X-Remote-*`) are always stripped before the proxy adds its
own: a client cannot choose who it is upstream.
"""

from __future__ import annotations

import functools

from multidict import CIMultiDict, CIMultiDictProxy

from proxy.clients.partition import InvalidRequest

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
# Recomputed by the transport for the new message.
_RECOMPUTED = frozenset({"host", "content-length"})
_NEVER_UPSTREAM = HOP_BY_HOP | _RECOMPUTED | {"authorization"}
# An answer's hop-by-hop fields as the transport receives them (lower-cased bytes).
_HOP_BY_HOP_BYTES = frozenset(h.encode() for h in HOP_BY_HOP)


def _connection_tokens(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> set[str]:
    return {t.strip().lower() for v in headers.getall("Connection", []) for t in v.split(",")}


def upstream_request_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The client's headers minus hop-by-hop, identity and recomputed ones."""
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in _upstream_fields(headers, ()):
        out.add(key, value)
    return out


def upstream_header_block(headers: CIMultiDictProxy[str], *, replace: dict[str, str | None] | None = None) -> str:
    """What `upstream_request_headers` keeps, written as HTTP/1.1 header lines (each ending in
    CRLF) for `PartitionClient.request(header_block=...)`: the forward's hot path, one string
    instead of a header map copied twice. `replace` sets (a value) or removes (None) headers by
    lower-case name. Raises InvalidRequest for a value with a line break (the fronts' parsers
    refuse those first).

    A client sends the same headers on every request (client-go: User-Agent, Accept,
    Accept-Encoding, Content-Type), so the block of each header set is remembered
    (`_BLOCKS`), except for sets that carry a credential (Authorization: a bearer token is not
    kept beyond its request) or that are large."""
    if "Authorization" in headers:
        return _header_block(headers, replace or {})
    key = (tuple(headers.items()), tuple(replace.items()) if replace else ())
    block = _BLOCKS.get(key)
    if block is None:
        block = _header_block(headers, replace or {})
        if sum(len(name) + len(value) for name, value in key[0]) <= _BLOCK_MEMO_LARGEST:
            if len(_BLOCKS) >= _BLOCK_MEMO_SIZE:
                _BLOCKS.clear()
            _BLOCKS[key] = block
    return block


# header sets whose block is remembered; past it the memo starts again empty. A replica's
# clients use a few kinds of client (kubelets, controllers, schedulers, kubectl), each one set
# per request kind; 256 sets of at most _BLOCK_MEMO_LARGEST bytes keep it under ~1 MiB.
_BLOCK_MEMO_SIZE = 256
# bytes of header names and values: a larger set is not remembered (client-go's are ~150).
_BLOCK_MEMO_LARGEST = 2048
_BLOCKS: dict[tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str | None], ...]], str] = {}


def _header_block(headers: CIMultiDictProxy[str], replace: dict[str, str | None]) -> str:
    fields = [f"{key}: {value}" for key, value in _upstream_fields(headers, replace)]
    fields += (f"{key}: {value}" for key, value in replace.items() if value is not None)
    if not fields:
        return ""
    block = "\r\n".join(fields) + "\r\n"
    if block.count("\n") != len(fields) or block.count("\r") != len(fields):
        raise InvalidRequest("a header contains a line break")
    return block


def _upstream_fields(headers: CIMultiDictProxy[str], leave_out: tuple[str, ...] | dict[str, str | None]) -> list[tuple[str, str]]:
    connection = _connection_tokens(headers) if "Connection" in headers else ()
    out = []
    for key, value in headers.items():
        lower = _may_go_upstream(key)
        if lower is None or lower in connection or lower in leave_out:
            continue
        out.append((key, value))
    return out


@functools.lru_cache(maxsize=1024)  # names: clients send the same few on every request
def _may_go_upstream(name: str) -> str | None:
    """The lower-case `name`, or None for a header that never goes to a partition."""
    lower = name.lower()
    return None if lower in _NEVER_UPSTREAM or lower.startswith(_IDENTITY_PREFIXES) else lower


def downstream_raw_headers(raw: list[tuple[bytes, bytes]], *, keep_length: bool) -> CIMultiDict[str]:
    """`downstream_response_headers` of an answer's fields as the transport received them."""
    connection: frozenset[bytes] | set[bytes] = frozenset()
    for name, value in raw:
        if len(name) == 10 and name.lower() == b"connection":
            connection = {t.strip().lower() for t in value.split(b",")}
    out: CIMultiDict[str] = CIMultiDict()
    add = out.add
    for name, value in raw:
        text, lower = _downstream_name(name)
        if text is None or lower in connection or (not keep_length and lower == b"content-length"):
            continue
        add(text, value.decode("latin-1"))
    return out


@functools.lru_cache(maxsize=1024)  # names: a kube-apiserver sends the same few in every answer
def _downstream_name(name: bytes) -> tuple[str | None, bytes]:
    """An answer's header name as text (None for a hop-by-hop one, which never goes to the
    client) and lower-cased."""
    lower = name.lower()
    return (None if lower in _HOP_BY_HOP_BYTES else name.decode("latin-1")), lower


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
