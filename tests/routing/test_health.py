"""The partitions' verbose health answers merged into one kube-apiserver's (routing.health)."""

from __future__ import annotations

from routing.health import Check, merge_checks, parse_checks, verbose_answer

TP1 = """[+]ping ok
[+]log ok
[+]etcd ok
[+]poststarthook/start-apiserver-admission-initializer ok
livez check passed
"""
TP2_ETCD_DOWN = """[+]ping ok
[+]log ok
[-]etcd failed: reason withheld
[+]poststarthook/start-apiserver-admission-initializer ok
livez check failed
"""


def test_check_lines_are_read_and_the_summary_line_is_not() -> None:
    assert parse_checks(TP1) == [Check("ping", True), Check("log", True), Check("etcd", True),
                                 Check("poststarthook/start-apiserver-admission-initializer", True)]
    assert parse_checks("ok") == []


def test_a_check_passes_only_when_it_passes_on_every_partition_that_runs_it() -> None:
    merged = merge_checks({"tp1": parse_checks(TP1), "tp2": parse_checks(TP2_ETCD_DOWN)})

    assert [c.line() for c in merged] == [
        "[+]ping ok", "[+]log ok", "[-]etcd failed: reason withheld", "[+]poststarthook/start-apiserver-admission-initializer ok"]
    assert merged[2].failing == ("tp2",)


def test_a_check_only_some_partitions_run_is_listed_once_in_the_first_order_seen() -> None:
    merged = merge_checks({"tp1": [Check("ping", True)], "rp1": [Check("ping", True), Check("poststarthook/only-here", True)]})

    assert [c.name for c in merged] == ["ping", "poststarthook/only-here"]


def test_a_partition_that_does_not_answer_fails_a_check_of_its_own() -> None:
    merged = merge_checks({"tp1": parse_checks(TP1), "rp1": None})

    assert merged[-1] == Check("partition/rp1", False, ("rp1",))
    assert verbose_answer("livez", merged)[0] == 500


def test_the_verbose_answer_ends_as_kube_apiservers_does() -> None:
    status, body = verbose_answer("healthz", merge_checks({"tp1": parse_checks(TP1)}) + [Check("partition-proxy/ping", True)])

    assert status == 200
    assert body.splitlines()[-2:] == ["[+]partition-proxy/ping ok", "healthz check passed"]
    status, body = verbose_answer("readyz", [Check("partition-proxy/resource-version-table", False)])
    assert status == 500 and body.endswith("readyz check failed\n")
