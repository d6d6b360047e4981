"""Which representation a cached answer takes: routing.cache_policy's Accept rules."""

from __future__ import annotations

import pytest

from routing.cache_policy import accepts_plain_json, prefers_protobuf


@pytest.mark.parametrize(
    ("accept", "protobuf", "json"),
    [
        ("application/vnd.kubernetes.protobuf, application/json", True, True),  # client-go, kubelets
        ("application/vnd.kubernetes.protobuf,*/*", True, True),
        ("application/vnd.kubernetes.protobuf;stream=watch, application/json", True, True),
        ("application/json, application/vnd.kubernetes.protobuf", False, True),  # JSON first: JSON
        ("application/json", False, True),
        ("", False, True),
        ("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json", False, True),
        ("application/vnd.kubernetes.protobuf", True, False),  # protobuf only: not from a cache
    ],
)
def test_protobuf_is_preferred_only_when_it_is_the_first_media_range(accept: str, protobuf: bool, json: bool) -> None:
    assert prefers_protobuf(accept) is protobuf
    assert accepts_plain_json(accept) is json
