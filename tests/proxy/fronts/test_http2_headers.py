"""HPACK for the HTTP/2 front (proxy.fronts.http2_headers): request blocks from python-hyper's
hpack encoder decode to what was encoded, answers decode with its decoder to what was given."""

from __future__ import annotations

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.fronts import http2_headers
from proxy.fronts.http2_headers import (
    HOST,
    MALFORMED,
    PSEUDO,
    REGULAR,
    AnswerEncoder,
    CompressionError,
    HeaderDecoder,
    HeaderListTooLarge,
    MalformedRequest,
    request_head,
)

NAMES = st.sampled_from(["accept", "user-agent", "content-type", "x-a", "x-long-name-" + "n" * 30, "authorization", "cookie", "te"])
VALUES = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=300)
FIELD_LISTS = st.lists(st.tuples(NAMES, VALUES), max_size=12)


@given(blocks=st.lists(st.tuples(FIELD_LISTS, st.booleans()), min_size=1, max_size=8),
       table_size=st.sampled_from([0, 64, 256, 4096]))
@settings(max_examples=200, deadline=None)
def test_request_blocks_decode_to_what_hpack_encoded_through_the_dynamic_table(
        blocks: list[tuple[list[tuple[str, str]], bool]], table_size: int) -> None:
    encoder = hpack.Encoder()
    encoder.header_table_size = table_size  # a size update starts the first block, then entries evict
    decoder = HeaderDecoder(max_list_size=1 << 20)
    for fields, huffman in blocks:
        pseudo = [(":method", "GET"), (":scheme", "https"), (":path", "/api/v1/pods"), (":authority", "a:1")]
        decoded = decoder.decode(encoder.encode(pseudo + fields, huffman=huffman))
        assert [(n, v) for n, v, _, _ in decoded] == pseudo + fields
        assert [k for _, _, _, k in decoded[:4]] == [PSEUDO] * 4
        assert all(k == (MALFORMED if n == "te" and v.lower() != "trailers" else REGULAR) for n, v, _, k in decoded[4:])


def test_never_indexed_fields_and_large_integers_decode() -> None:
    encoder = hpack.Encoder()
    fields = [(":method", "GET"), (":scheme", "https"), (":path", "/" + "p" * 5000), (":authority", "a"),
              hpack.NeverIndexedHeaderTuple("authorization", "Bearer " + "t" * 200)]
    decoded = HeaderDecoder(max_list_size=1 << 20).decode(encoder.encode(fields, huffman=False))
    assert [(n, v) for n, v, _, _ in decoded] == [(str(n), str(v)) for n, v in fields]


def test_a_header_list_past_the_limit_raises() -> None:
    block = hpack.Encoder().encode([("x-a", "v" * 100)] * 5)
    HeaderDecoder(max_list_size=5 * (3 + 100 + 32)).decode(block)
    with pytest.raises(HeaderListTooLarge):
        HeaderDecoder(max_list_size=5 * (3 + 100 + 32) - 1).decode(block)


@pytest.mark.parametrize("block", [b"\x80", b"\xbe", b"\x7f", b"\x40\x85abc", b"\x20\x20\x20", b"\x82\x20", b"\xff\xff\xff\xff\xff\xff\x01"])
def test_blocks_hpack_forbids_raise_compression_error(block: bytes) -> None:
    with pytest.raises(CompressionError):
        HeaderDecoder(max_list_size=1 << 20).decode(block)


def test_connections_share_the_literal_fields_they_have_in_common_until_the_shared_set_is_full(monkeypatch: pytest.MonkeyPatch) -> None:
    def decoded(headers: list[tuple[str, str]]) -> dict[str, tuple[str, str, int, int]]:
        fields = HeaderDecoder(max_list_size=1 << 20).decode(hpack.Encoder().encode(headers))  # a new connection
        return {f[0]: f for f in fields}

    common = [(":method", "GET"), (":scheme", "https"), ("user-agent", "kubelet/v1.36.0 (linux/amd64) shared-test"),
              ("x-bad", "a\x00b")]
    first = decoded([*common, (":path", "/api/v1/nodes/shared-test-1")])
    second = decoded([*common, (":path", "/api/v1/nodes/shared-test-2")])
    assert first["user-agent"] is second["user-agent"]  # one Field (and its strings) for both tables
    assert first["x-bad"] is second["x-bad"] and first["x-bad"][3] == MALFORMED  # checked once, still refused
    assert first[":path"][1].endswith("-1") and second[":path"][1].endswith("-2")
    token = [("authorization", "Bearer shared-test-token")]
    assert decoded(token)["authorization"] is not decoded(token)["authorization"]  # a credential is never shared
    assert not any(name == "authorization" for name, _ in http2_headers._shared_fields)
    large = [("x-large", "v" * 1000)]  # kept whole for its own connection, never process-wide
    assert decoded(large)["x-large"] == ("x-large", "v" * 1000, 1039, REGULAR)
    assert ("x-large", "v" * 1000) not in http2_headers._shared_fields
    never_indexed = HeaderDecoder(max_list_size=1 << 20).decode(hpack.Encoder().encode([("x-secret", "s", True)]))
    assert never_indexed == [("x-secret", "s", 41, REGULAR)] and ("x-secret", "s") not in http2_headers._shared_fields

    monkeypatch.setattr(http2_headers, "_MAX_SHARED_FIELDS", len(http2_headers._shared_fields))
    third, fourth = decoded([("x-late", "v")]), decoded([("x-late", "v")])
    assert third["x-late"] == fourth["x-late"] == ("x-late", "v", 39, REGULAR)  # decoded alike ...
    assert third["x-late"] is not fourth["x-late"]  # ... but each connection's own once the set is full


def test_host_and_pseudo_fields_are_told_apart() -> None:
    fields = [("host", "a", 37, HOST)]
    head = request_head([(":method", "GET", 0, PSEUDO), (":scheme", "https", 0, PSEUDO), (":path", "/x", 0, PSEUDO), *fields])
    assert (head.method, head.path, head.authority, head.headers) == ("GET", "/x", None, [("host", "a")])
    with pytest.raises(MalformedRequest):
        request_head([(":method", "GET", 0, PSEUDO), (":scheme", "https", 0, PSEUDO), (":path", "/x", 0, PSEUDO), *fields, *fields])


def test_an_ordinary_connect_needs_no_path() -> None:
    head = request_head([(":method", "CONNECT", 0, PSEUDO), (":authority", "a:443", 0, PSEUDO)])
    assert (head.method, head.path) == ("CONNECT", "/")


ANSWER_NAMES = st.sampled_from(["Audit-Id", "Cache-Control", "Content-Type", "X-Kubernetes-Pf-Flowschema-Uid", "Date", "Warning",
                                "Retry-After", "Location", "X-Custom-" + "h" * 200, "Vary"])


@given(status=st.integers(min_value=100, max_value=599), fields=st.lists(st.tuples(ANSWER_NAMES, VALUES), max_size=10),
       content_type=st.none() | st.sampled_from(["application/json", "application/vnd.kubernetes.protobuf"]),
       length=st.none() | st.integers(min_value=0, max_value=10**9))
@settings(max_examples=300, deadline=None)
def test_answers_decode_with_hpack_to_the_headers_given(status: int, fields: list[tuple[str, str]], content_type: str | None,
                                                      length: int | None) -> None:
    encoder = AnswerEncoder()
    for _ in range(2):  # encoded, then from the cache: the same bytes
        block = encoder.encode(status, fields, content_type=content_type, content_length=length)
        decoded = hpack.Decoder().decode(block)
        expected = [(":status", str(status)), *((n.lower(), v) for n, v in fields)]
        expected += [("content-type", content_type)] if content_type is not None else []
        expected += [("content-length", str(length))] if length is not None else []
        assert decoded == expected


def test_connection_specific_fields_and_a_stale_length_are_left_out_of_answers() -> None:
    fields = [("Connection", "keep-alive"), ("Keep-Alive", "timeout=5"), ("Transfer-Encoding", "chunked"), ("Upgrade", "h2c"),
              ("TE", "trailers"), ("Proxy-Connection", "x"), ("Content-Length", "999"), ("Audit-Id", "a")]
    decoded = hpack.Decoder().decode(AnswerEncoder().encode(204, fields, content_length=0))
    assert decoded == [(":status", "204"), ("audit-id", "a"), ("content-length", "0")]


def test_an_answer_is_all_static_references_and_literals_without_indexing() -> None:
    block = AnswerEncoder().encode(200, [("Content-Type", "application/json"), ("X-A", "b")])
    # :status 200 indexed (0x88), content-type by static name index 31 (0x0f 0x10), x-a as a new name
    assert block == b"\x88" + b"\x0f\x10\x10application/json" + b"\x00\x03x-a\x01b"
