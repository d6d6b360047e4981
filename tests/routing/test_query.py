"""Query parameters of API requests: routing.query."""

from __future__ import annotations

import pytest

from routing.query import refused_watch_options, translated_query, watch_lifetime


@pytest.mark.parametrize(
    ("query", "refused"),
    [
        ({}, False),
        ({"resourceVersion": "7"}, False),
        ({"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}, False),
        ({"sendInitialEvents": "false", "resourceVersionMatch": "NotOlderThan"}, False),
        # apimachinery validateWatchOptions: 422 Invalid
        ({"sendInitialEvents": "true"}, True),
        ({"sendInitialEvents": "false"}, True),
        ({"sendInitialEvents": "true", "resourceVersionMatch": "Exact"}, True),
        ({"resourceVersionMatch": "NotOlderThan"}, True),
        ({"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "continue": "abc"}, True),
    ],
)
def test_watch_options_kube_apiserver_refuses(query: dict[str, str], refused: bool) -> None:
    assert refused_watch_options(query) is refused


def test_a_translated_query_replaces_and_removes_whole_parameters_and_keeps_the_rest() -> None:
    got = translated_query("watch=1&labelSelector=a%3Db&timeoutSeconds=5", replace={"timeoutSeconds": None, "resourceVersion": "9"})
    assert got == "watch=1&labelSelector=a%3Db&resourceVersion=9"


def test_a_watch_lives_its_timeout_seconds_else_between_half_an_hour_and_an_hour() -> None:
    assert watch_lifetime({"timeoutSeconds": "42"}) == 42.0
    assert watch_lifetime({}, choose=0.0) == 1800.0
    assert 1800.0 <= watch_lifetime({"timeoutSeconds": "x"}) < 3600.0
