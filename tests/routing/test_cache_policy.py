"""Which requests a cache answers and in which representation: routing.cache_policy."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from routing import rv as rvcodec
from routing.cache_policy import CacheMode, CacheSpec, accepts_plain_json, choose, is_consistent_read, prefers_protobuf
from routing.requestinfo import parse_request_info
from routing.selectors import parse_field_selector, parse_label_selector


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


# -- a system cache: the system partition's cluster-scoped objects in native RVs ----------------

SYSTEM = CacheSpec(group="storage.k8s.io", resource="csidrivers", namespace="", label_selector=parse_label_selector(""),
                   field_selector=parse_field_selector(""), codec=rvcodec.NativeCodec("tp1"))
CSIDRIVERS = "/apis/storage.k8s.io/v1/csidrivers"


def _choose(query: dict[str, str], *, rv_space: tuple[str, ...] = (), partitions: tuple[str, ...] = ("tp1",)) -> list[CacheMode]:
    info = parse_request_info("GET", CSIDRIVERS, query)
    return [plan.mode for _, plan in choose([SYSTEM], info, query, "application/json", rv_space=rv_space, partitions=partitions)]


def test_a_system_cache_answers_the_system_partitions_routes_in_native_rvs() -> None:
    assert _choose({"resourceVersion": "0"}) == [CacheMode.LIST]
    assert _choose({"watch": "1", "resourceVersion": "4711"}) == [CacheMode.WATCH]
    # another partition's route, or a route in a merged RV space, is not the cache's
    assert _choose({"resourceVersion": "0"}, partitions=("tp2",)) == []
    assert _choose({"resourceVersion": "0"}, rv_space=("tp1", "tp2")) == []
    # an RV the partition never issued (a proxy RV) goes upstream, which answers it
    assert _choose({"watch": "1", "resourceVersion": str(rvcodec.OBJECT_MARKER + 5)}) == []


@given(st.integers(1, rvcodec.NATIVE_LIMIT - 1))
def test_the_native_codec_speaks_the_partitions_own_rvs(native: int) -> None:
    codec = rvcodec.NativeCodec("tp1")
    assert codec.encode([native]) == codec.object_rv(0, native) == str(native)
    assert codec.decode(str(native)) == (native,)
    assert codec.native_for(str(native), 0) is None  # sent to the partition as it is
    assert codec.rv_space == () and codec.space == ("tp1",)


@pytest.mark.parametrize("rv", ["abc", "-1", "0", str(rvcodec.NATIVE_LIMIT), "1.5"])
def test_the_native_codec_refuses_what_is_no_native_rv(rv: str) -> None:
    with pytest.raises(rvcodec.RVMalformed):
        rvcodec.NativeCodec("tp1").decode(rv)


@pytest.mark.parametrize(
    ("query", "modes"),
    [
        ({"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}, [CacheMode.WATCH]),
        ({"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "resourceVersion": "7"}, [CacheMode.WATCH]),
        # kube-apiserver answers 422 Invalid (validateWatchOptions): the partitions say so
        ({"watch": "1", "sendInitialEvents": "true"}, []),
        ({"watch": "1", "sendInitialEvents": "false"}, []),
        ({"watch": "1", "resourceVersionMatch": "NotOlderThan"}, []),
        ({"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "Exact"}, []),
        # valid, rare: a watch from an RV with NotOlderThan semantics and no initial events
        ({"watch": "1", "sendInitialEvents": "false", "resourceVersionMatch": "NotOlderThan"}, []),
    ],
)
def test_a_watch_is_served_from_the_cache_only_with_the_options_kube_apiserver_accepts(query: dict[str, str], modes: list[CacheMode]) -> None:
    assert _choose(query) == modes


def _choose_get(name: str, query: dict[str, str]) -> list[CacheMode]:
    info = parse_request_info("GET", f"{CSIDRIVERS}/{name}", query)
    return [plan.mode for _, plan in choose([SYSTEM], info, query, "application/json", rv_space=(), partitions=("tp1",))]


@pytest.mark.parametrize("selector", [{}, {"labelSelector": "a=b"}, {"labelSelector": "a in (b"}, {"fieldSelector": "spec.x=y"}])
def test_a_consistent_read_goes_upstream_whatever_its_selectors(selector: dict[str, str]) -> None:
    """A GET without resourceVersion=0 and a LIST without a resourceVersion are consistent reads
    only the partitions answer (the cacher's rule too, without ConsistentListFromCache): no cache,
    valid selectors or not. With resourceVersion=0 the cache answers a valid selection."""
    assert _choose_get("csi.example.com", selector) == []
    assert _choose_get("csi.example.com", {**selector, "resourceVersion": "4711"}) == []
    assert _choose(selector) == []
    valid = "(" not in selector.get("labelSelector", "") and "fieldSelector" not in selector
    assert _choose_get("csi.example.com", {**selector, "resourceVersion": "0"}) == ([CacheMode.GET] if valid else [])
    assert _choose({**selector, "resourceVersion": "0"}) == ([CacheMode.LIST] if valid else [])


_QUERY_VALUES = st.sampled_from(["", "0", "4711", str(rvcodec.OBJECT_MARKER + 5), "NotOlderThan", "Exact", "true", "x=y", "10"])


@given(
    verb=st.sampled_from(["get", "list", "watch"]),
    query=st.dictionaries(st.sampled_from(["resourceVersion", "resourceVersionMatch", "sendInitialEvents", "limit", "continue",
                                           "labelSelector", "allowWatchBookmarks"]), _QUERY_VALUES),
)
def test_the_dispatchers_consistent_read_test_never_hides_a_cache_that_could_answer(verb: str, query: dict[str, str]) -> None:
    """`is_consistent_read` lets the dispatcher skip the search for a cache: it may only say so
    for requests no cache answers. Conversely a GET without resourceVersion=0 and a LIST without
    a resourceVersion are always such reads."""
    path = f"{CSIDRIVERS}/csi.example.com" if verb == "get" else CSIDRIVERS
    query = {**query, "watch": "1"} if verb == "watch" else query
    info = parse_request_info("GET", path, query)
    assert info.verb == verb
    modes = [plan.mode for _, plan in choose([SYSTEM], info, query, "application/json", rv_space=(), partitions=("tp1",))]
    if is_consistent_read(info, query):
        assert modes == []
    rv = query.get("resourceVersion", "")
    assert is_consistent_read(info, query) is ((verb == "get" and rv != "0") or (verb == "list" and rv == ""))
