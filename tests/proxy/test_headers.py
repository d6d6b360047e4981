"""Which headers cross the proxy (proxy.headers): hop-by-hop and identity headers never do, and
the remembered upstream blocks say exactly what the rules say."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from proxy import headers
from proxy.clients.partition import InvalidRequest
from proxy.headers import downstream_raw_headers, upstream_header_block

CLIENT_GO = [("User-Agent", "kubelet/v1.36.0 (linux/amd64) kubernetes/abcdef"),
             ("Accept", "application/vnd.kubernetes.protobuf,application/json"), ("Accept-Encoding", "gzip")]


def _proxy(fields: list[tuple[str, str]]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(fields))


def test_hop_by_hop_identity_and_framing_headers_never_go_upstream() -> None:
    fields = CLIENT_GO + [("Connection", "keep-alive, X-Secret"), ("X-Secret", "1"), ("Keep-Alive", "timeout=5"),
                          ("Impersonate-User", "admin"), ("X-Remote-Group", "system:masters"), ("Host", "proxy"),
                          ("Content-Length", "3"), ("Transfer-Encoding", "chunked"), ("Content-Type", "application/json")]
    block = upstream_header_block(_proxy(fields))
    assert block == "".join(f"{k}: {v}\r\n" for k, v in CLIENT_GO + [("Content-Type", "application/json")])


def test_replace_sets_and_removes_headers_by_lower_case_name() -> None:
    block = upstream_header_block(_proxy(CLIENT_GO), replace={"accept": "application/json", "accept-encoding": None})
    assert block == f"User-Agent: {CLIENT_GO[0][1]}\r\naccept: application/json\r\n"


_NAMES = st.sampled_from(["User-Agent", "Accept", "accept", "Content-Type", "Connection", "X-Trace", "Impersonate-Group",
                          "Authorization", "TE", "Upgrade", "Audit-Id"])
_VALUES = st.sampled_from(["", "gzip", "X-Trace", "close", "application/json", "Bearer abc", "a, b"])


@given(fields=st.lists(st.tuples(_NAMES, _VALUES), max_size=8),
       replace=st.dictionaries(st.sampled_from(["accept", "accept-encoding", "x-trace"]), st.none() | _VALUES, max_size=2))
def test_a_remembered_block_is_the_block_the_rules_make(fields: list[tuple[str, str]], replace: dict[str, str | None]) -> None:
    """Asked twice (the second time from the memo, when the set may be remembered), the block
    is the one `_header_block` writes, whatever the fields."""
    request = _proxy(fields)
    expected = headers._header_block(request, dict(replace))
    assert upstream_header_block(request, replace=dict(replace) or None) == expected
    assert upstream_header_block(_proxy(list(fields)), replace=dict(replace) or None) == expected


def test_a_set_with_a_credential_is_not_remembered() -> None:
    headers._BLOCKS.clear()
    upstream_header_block(_proxy(CLIENT_GO + [("Authorization", "Bearer secret-token")]))
    assert headers._BLOCKS == {}
    upstream_header_block(_proxy(CLIENT_GO))
    assert len(headers._BLOCKS) == 1


def test_a_large_set_is_not_remembered_and_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    headers._BLOCKS.clear()
    upstream_header_block(_proxy(CLIENT_GO + [("X-Large", "x" * headers._BLOCK_MEMO_LARGEST)]))
    assert headers._BLOCKS == {}
    monkeypatch.setattr(headers, "_BLOCK_MEMO_SIZE", 4)
    for i in range(10):
        assert upstream_header_block(_proxy(CLIENT_GO + [("X-Request", str(i))])).endswith(f"X-Request: {i}\r\n")
        assert len(headers._BLOCKS) <= 4


def test_a_line_break_in_a_value_is_refused_every_time() -> None:
    request = _proxy(CLIENT_GO + [("X-Bad", "a\r\nInjected: yes")])
    for _ in range(2):
        with pytest.raises(InvalidRequest):
            upstream_header_block(request)


def test_an_answers_hop_by_hop_fields_and_its_connection_tokens_stay_behind() -> None:
    raw = [(b"Audit-Id", b"42"), (b"Connection", b"keep-alive, X-Hop"), (b"X-Hop", b"1"), (b"Transfer-Encoding", b"chunked"),
           (b"Content-Type", b"application/json"), (b"Content-Length", b"12"), (b"Warning", b"299 - \xe9")]
    kept = downstream_raw_headers(raw, keep_length=True)
    assert list(kept.items()) == [("Audit-Id", "42"), ("Content-Type", "application/json"), ("Content-Length", "12"),
                                  ("Warning", "299 - \xe9")]
    assert "Content-Length" not in downstream_raw_headers(raw, keep_length=False)
