"""The pure part of `make conformance` (hack/conformance.py): the spec selection, the e2e.test
command line, JUnit parsing and the proxy-vs-peer comparison. No clusters: JUnit reports are
written by hand in the shape ginkgo v2 writes them for the e2e framework's --report-dir
(reporters.GenerateJUnitReportWithConfig with OmitFailureMessageAttr: the failure text is the
element's content, `[FAILED] <message>` then `In [It] at: <file:line> <time>`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import conformance
from hack.controlplane import KWOK_DIR
from hack.conformance import (
    SELECTION,
    Row,
    Selection,
    Side,
    SideReport,
    SideRun,
    SpecResult,
    classify,
    compare,
    counts,
    e2e_argv,
    environment_reason,
    exit_code,
    hollow_nodes,
    kwok_manifests,
    not_ready_nodes,
    parse_junit,
    parse_sides,
    render_markdown,
    result_json,
    side_counts,
)

HEALTH = "[sig-api-machinery] health handlers should contain necessary checks"
INGRESS = "[sig-network] Ingress API should support creating Ingress API operations [Conformance]"
WATCH = "[sig-api-machinery] Watchers should be able to start watching from a specific resource version [Conformance]"
QUOTA = "[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a pod. [Conformance]"

PROXY_JUNIT = f"""<?xml version="1.0" encoding="UTF-8"?>
  <testsuites tests="7" disabled="1" errors="1" failures="2" time="95.5">
      <testsuite name="Kubernetes e2e suite" package="/work" tests="7" disabled="0" skipped="1" errors="1" failures="2" time="95.5" timestamp="2026-11-25T22:06:08">
          <properties>
              <property name="SuiteSucceeded" value="false"></property>
          </properties>
          <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.2"></testcase>
          <testcase name="[It] {HEALTH}" classname="Kubernetes e2e suite" status="failed" time="3.5">
              <failure message="" type="failed">[FAILED] health check &#34;etcd&#34; missing from /livez?verbose
Expected
    &lt;bool&gt;: false
to be true
In [It] at: k8s.io/kubernetes@v1.36.3/test/e2e/apimachinery/health_handlers.go:275 @ 11/25/26 22:10:01.2
</failure>
              <system-err>STEP: Creating a kubernetes client</system-err>
          </testcase>
          <testcase name="[It] {INGRESS}" classname="Kubernetes e2e suite" status="passed" time="2.25"></testcase>
          <testcase name="[It] {WATCH}" classname="Kubernetes e2e suite" status="timedout" time="60">
              <failure message="" type="timedout">[TIMEDOUT] A suite timeout occurred
In [It] at: k8s.io/kubernetes@v1.36.3/test/e2e/apimachinery/watch.go:142 @ 11/25/26 22:11:01.2
</failure>
          </testcase>
          <testcase name="[It] {QUOTA}" classname="Kubernetes e2e suite" status="skipped" time="0">
              <skipped message="skipped - Only supported for providers [gce gke] (not skeleton)"></skipped>
          </testcase>
          <testcase name="[It] [sig-storage] left out by the focus" classname="Kubernetes e2e suite" status="skipped" time="0">
              <skipped message="skipped"></skipped>
          </testcase>
          <testcase name="[It] [sig-apps] Job should delete a job [Conformance]" classname="Kubernetes e2e suite" status="panicked" time="1">
              <error message="" type="panicked">[PANICKED] Test Panicked
runtime error: invalid memory address or nil pointer dereference
</error>
          </testcase>
          <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="passed" time="0.01"></testcase>
      </testsuite>
  </testsuites>
"""


def spec(name: str, state: str = "passed", failure: str = "") -> SpecResult:
    ginkgo_state = {"failed": "failed"}.get(state, state)
    return SpecResult(name, state, 1.0, ginkgo_state, failure)  # type: ignore[arg-type]


def report(*specs: SpecResult) -> SideReport:
    return SideReport(specs={s.name: s for s in specs})


# -- JUnit parsing ---------------------------------------------------------------------------


def test_junit_specs_are_keyed_by_full_text_without_the_it_prefix_and_suite_nodes_left_out() -> None:
    parsed = parse_junit(PROXY_JUNIT)

    assert set(parsed.specs) == {HEALTH, INGRESS, WATCH, QUOTA, "[sig-apps] Job should delete a job [Conformance]",
                                 "[sig-storage] left out by the focus"}
    assert parsed.suite_failures == ()
    assert parsed.why_not_run == ""
    assert parsed.seconds == 95.5


@pytest.mark.parametrize(("name", "state", "ginkgo_state", "first_line"), [
    (HEALTH, "failed", "failed", 'health check "etcd" missing from /livez?verbose'),
    (INGRESS, "passed", "passed", ""),
    (WATCH, "failed", "timedout", "A suite timeout occurred"),
    (QUOTA, "skipped", "skipped", "skipped - Only supported for providers [gce gke] (not skeleton)"),
    ("[sig-storage] left out by the focus", "not_run", "skipped", "skipped"),
    ("[sig-apps] Job should delete a job [Conformance]", "failed", "panicked", "Test Panicked"),
])
def test_junit_states_map_to_passed_failed_or_skipped_with_the_failure_first_line(
        name: str, state: str, ginkgo_state: str, first_line: str) -> None:
    result = parse_junit(PROXY_JUNIT).specs[name]

    assert (result.state, result.ginkgo_state, result.first_line) == (state, ginkgo_state, first_line)


def test_junit_failure_keeps_the_whole_text_and_the_run_time() -> None:
    result = parse_junit(PROXY_JUNIT).specs[HEALTH]

    assert "In [It] at: k8s.io/kubernetes@v1.36.3/test/e2e/apimachinery/health_handlers.go:275" in result.failure
    assert result.seconds == 3.5


def test_junit_counts_specs_per_state() -> None:
    parsed = parse_junit(PROXY_JUNIT)

    assert [parsed.count(state) for state in ("passed", "failed", "skipped", "not_run")] == [1, 3, 1, 1]


BEFORE_SUITE_FAILED = """<testsuites><testsuite name="Kubernetes e2e suite" time="12">
  <properties><property name="SpecialSuiteFailureReason" value=""></property></properties>
  <testcase name="[SynchronizedBeforeSuite]" status="failed" time="10">
    <failure type="failed">[FAILED] Error waiting for all pods to be running and ready: timed out
In [SynchronizedBeforeSuite] at: k8s.io/kubernetes@v1.36.3/test/e2e/e2e.go:231</failure></testcase>
  <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" status="passed" time="0"></testcase>
</testsuite></testsuites>"""

SUITE_TIMED_OUT = f"""<testsuites><testsuite name="Kubernetes e2e suite" time="10800">
  <properties><property name="SpecialSuiteFailureReason" value="Suite Timeout Elapsed"></property></properties>
  <testcase name="[It] {INGRESS}" status="passed" time="2"></testcase>
  <testcase name="[It] {HEALTH}" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
</testsuite></testsuites>"""


def test_a_failed_suite_node_is_a_suite_failure_not_a_spec() -> None:
    parsed = parse_junit(BEFORE_SUITE_FAILED)

    assert [f.name for f in parsed.suite_failures] == ["[SynchronizedBeforeSuite]"]
    assert parsed.specs == {}
    assert parsed.why_not_run == (
        "[SynchronizedBeforeSuite] failed: Error waiting for all pods to be running and ready: timed out")


def test_a_suite_timeout_is_why_the_rest_did_not_run() -> None:
    parsed = parse_junit(SUITE_TIMED_OUT)

    assert parsed.why_not_run == "Suite Timeout Elapsed"
    assert parsed.specs[HEALTH].state == "not_run"


def test_two_specs_with_one_text_are_both_kept() -> None:
    xml = f"""<testsuites><testsuite>
      <testcase name="[It] {INGRESS}" status="passed" time="1"/>
      <testcase name="[It] {INGRESS}" status="failed" time="1"><failure type="failed">[FAILED] x</failure></testcase>
    </testsuite></testsuites>"""

    assert sorted(parse_junit(xml).specs) == [INGRESS, f"{INGRESS} (#2)"]


def test_a_single_testsuite_root_is_read_too() -> None:
    xml = f'<testsuite time="2"><testcase name="[It] {INGRESS}" status="passed" time="2"/></testsuite>'

    assert parse_junit(xml).specs[INGRESS].state == "passed"


@pytest.mark.parametrize("text", ["not xml at all <", "<html><body/></html>"])
def test_what_is_not_a_junit_report_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_junit(text)


# -- classification and comparison -------------------------------------------------------------


@pytest.mark.parametrize(("proxy", "peer", "category"), [
    ("passed", "passed", "both_pass"),
    ("failed", "passed", "regression"),
    ("skipped", "passed", "regression"),  # it did not run through the proxy although it passes straight
    ("passed", "failed", "peer_only"),
    ("passed", "skipped", "peer_only"),
    ("failed", "failed", "both_fail"),
    ("failed", "skipped", "both_fail"),
    ("skipped", "skipped", "neither_ran"),
    ("not_run", "passed", "regression"),  # the suite through the proxy ended before it
    ("not_run", "failed", "both_fail"),
    ("not_run", "skipped", "neither_ran"),
    (None, "passed", "one_side"),
    ("failed", None, "one_side"),
])
def test_classification_of_a_spec_by_its_two_sides(proxy: str | None, peer: str | None, category: str) -> None:
    p = spec(INGRESS, proxy) if proxy else None
    q = spec(INGRESS, peer) if peer else None

    assert classify(p, q) == category


def test_compare_lists_every_spec_of_either_side_regressions_first() -> None:
    proxy = report(spec(HEALTH, "failed", "[FAILED] etcd check missing"), spec(INGRESS), spec(WATCH),
                   spec(QUOTA, "failed", "[FAILED] failed calling webhook \"x\""))
    peer = report(spec(HEALTH), spec(INGRESS), spec(WATCH, "failed", "[FAILED] boom"),
                  spec(QUOTA, "failed", "[FAILED] failed calling webhook \"x\""), spec("[sig-x] only at the peer"))

    rows = compare({"proxy": proxy, "peer": peer})

    assert [(r.name, r.category) for r in rows] == [
        (HEALTH, "regression"), ("[sig-x] only at the peer", "regression"), (WATCH, "peer_only"),
        (QUOTA, "both_fail"), (INGRESS, "both_pass"),
    ]
    assert rows[1].proxy == SpecResult("[sig-x] only at the peer", "not_run", 0.0, "not run", "not in the report")
    assert rows[3].note.startswith("needs a server in a container")
    assert counts(rows) == {"regression": 2, "peer_only": 1, "both_fail": 1, "both_pass": 1, "neither_ran": 0,
                            "one_side": 0}


def test_compare_lists_the_selected_specs_only() -> None:
    proxy = parse_junit(PROXY_JUNIT)
    peer = report(spec(INGRESS), spec(HEALTH))

    rows = compare({"proxy": proxy, "peer": peer}, selected=[INGRESS, HEALTH])

    assert [(r.name, r.category) for r in rows] == [(HEALTH, "regression"), (INGRESS, "both_pass")]


def test_without_the_selection_specs_no_side_ran_are_left_out() -> None:
    rows = compare({"proxy": parse_junit(PROXY_JUNIT), "peer": parse_junit(PROXY_JUNIT)})

    assert "[sig-storage] left out by the focus" not in {r.name for r in rows}
    assert QUOTA in {r.name for r in rows}  # skipped by the spec itself: listed


def test_a_suite_that_failed_before_any_spec_makes_every_selected_spec_a_regression() -> None:
    rows = compare({"proxy": parse_junit(BEFORE_SUITE_FAILED), "peer": report(spec(INGRESS))}, selected=[INGRESS])

    assert [r.category for r in rows] == ["regression"]
    assert rows[0].proxy is not None and rows[0].proxy.first_line.startswith("[SynchronizedBeforeSuite] failed: Error")


def test_specs_a_timed_out_suite_did_not_reach_count_as_not_run() -> None:
    rows = compare({"proxy": parse_junit(SUITE_TIMED_OUT), "peer": report(spec(INGRESS), spec(HEALTH))},
                   selected=[INGRESS, HEALTH])

    assert [(r.name, r.category) for r in rows] == [(HEALTH, "regression"), (INGRESS, "both_pass")]
    assert rows[0].proxy is not None and rows[0].proxy.failure == "Suite Timeout Elapsed"
    assert side_counts(rows, "proxy") == {"passed": 1, "failed": 0, "skipped": 0, "not_run": 1}


def test_a_run_of_one_side_compares_nothing_and_has_no_regression() -> None:
    rows = compare({"proxy": report(spec(HEALTH, "failed", "[FAILED] x"))})

    assert [r.category for r in rows] == ["one_side"]
    assert exit_code(rows) == 0


def test_exit_code_is_1_only_with_a_regression() -> None:
    both_fail = Row(HEALTH, "both_fail", spec(HEALTH, "failed"), spec(HEALTH, "failed"))
    regression = Row(INGRESS, "regression", spec(INGRESS, "failed"), spec(INGRESS))

    assert exit_code([both_fail]) == 0
    assert exit_code([both_fail, regression]) == 1


@pytest.mark.parametrize(("failure", "reason"), [
    ('[FAILED] Internal error occurred: failed calling webhook "deny.k8s.io": no endpoints available for service',
     "needs a server in a container"),
    ("[FAILED] unable to upgrade connection: container not found", "needs exec in a container"),
    ("[FAILED] failed to get logs from pod-1", "needs container logs"),
    ("[FAILED] dial tcp 10.0.0.12:80: connect: connection refused", "needs pod networking"),
    ("[FAILED] waiting for service crd-selectable-fields-9910/e2e-test-crd-conversion-webhook have 1 endpoint: "
     "context deadline exceeded", "needs a server in a container"),
    ("[FAILED] PersistentVolumeClaims [test-claim] not all in phase Bound within 5m0s", "needs a volume provisioner"),
    ("[FAILED] failed to ensure job completion in namespace: job-1: Timed out after 900.000s.", "needs Job pods that end"),
    ("[FAILED] Expected <int>: 0 to equal <int>: 1", "unclassified"),
])
def test_environment_reason_is_read_from_the_failure(failure: str, reason: str) -> None:
    assert environment_reason(failure).startswith(reason)


def test_environment_reason_looks_at_every_text_given() -> None:
    assert environment_reason("", "[FAILED] failed to get logs").startswith("needs container logs")


# -- output ---------------------------------------------------------------------------------------


def test_markdown_and_json_name_the_regressions_with_their_first_line() -> None:
    proxy = report(spec(HEALTH, "failed", "[FAILED] etcd | check missing\nIn [It] at: x.go:1"), spec(INGRESS))
    peer = report(spec(HEALTH), spec(INGRESS))
    rows = compare({"proxy": proxy, "peer": peer})
    sides: dict[Side, SideRun] = {"proxy": SideRun(proxy, e2e_seconds=120.0), "peer": SideRun(peer, e2e_seconds=60.0)}

    md = render_markdown(rows, sides, selection=SELECTION, seed=7)
    data = result_json(rows, sides, selection=SELECTION, seed=7)

    assert f"| {HEALTH} | etcd \\| check missing |" in md
    assert "| proxy | 2 | 1 | 1 | 0 | 0 | 2.0 min | 0 s |" in md
    assert data["regressions"] == [HEALTH]
    assert data["counts"]["both_pass"] == 1
    assert data["sides"]["peer"]["specs_run"] == 2
    assert data["specs"][0]["proxy"]["first_line"] == "etcd | check missing"


# -- the selection and the command line ---------------------------------------------------------


def selected(selection: Selection, name: str) -> bool:
    """Ginkgo's rule (RE2; these patterns mean the same in Python's re)."""
    return bool(re.search(selection.focus_regex, name)) and not (selection.skip and re.search(selection.skip_regex, name))


@pytest.mark.parametrize(("name", "expected"), [
    (HEALTH, True),
    (INGRESS, True),
    (WATCH, True),
    ("[sig-api-machinery] API Streaming (aka. WatchList) [FeatureGate:WatchList] [Beta] reflector doesn't support "
     "receiving resources as Tables", True),  # a default-on beta gate
    ("[sig-node] RuntimeClass should support RuntimeClasses API operations [Conformance]", True),
    ("[sig-apps] Job should manage the lifecycle of a job [Conformance]", True),
    ("[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate configmap [Conformance]", False),
    ("[sig-api-machinery] Aggregator Should be able to support the 1.17 Sample API Server using the current "
     "Aggregator [LinuxOnly] [Conformance]", False),
    ("[sig-api-machinery] Servers with support for API chunking should support continue listing from the last key "
     "if the original version has been compacted away, though the list is inconsistent [Slow] [Conformance]", False),
    ("[sig-api-machinery] Namespaces [Serial] should ensure that all pods are removed when a namespace is deleted "
     "[Conformance]", False),
    ("[sig-api-machinery] x [FeatureGate:Y] [Beta] [Feature:OffByDefault] works", False),
    ("[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]", False),
    ("[sig-network] DNS should provide DNS for services [Conformance]", False),
    ("[sig-network] Services should serve a basic endpoint from pods [Conformance]", False),
    ("[sig-network] Ingress API should support creating Ingress API operations", False),  # not conformance
])
def test_the_selection_holds_api_machinery_and_api_only_conformance_specs(name: str, expected: bool) -> None:
    assert selected(SELECTION, name) is expected


def test_narrowing_replaces_the_focus_and_adds_to_the_skip() -> None:
    narrow = SELECTION.narrowed(focus="health handlers|Ingress API", skip="Ingress")

    assert narrow.skip[: len(SELECTION.skip)] == SELECTION.skip
    assert selected(narrow, HEALTH)
    assert not selected(narrow, INGRESS)
    assert not selected(narrow, WATCH)
    assert not selected(SELECTION.narrowed(focus="AdmissionWebhook"),
                        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate configmap")
    assert SELECTION.narrowed() == SELECTION


def test_both_sides_get_the_same_command_line_but_for_kubeconfig_and_reports() -> None:
    def argv(side: str) -> list[str]:
        return e2e_argv(binary=Path("/b/e2e.test"), kubeconfig=Path(f"/k/{side}.yaml"), report_dir=Path(f"/r/{side}"),
                        selection=SELECTION, seed=42, kubectl="/v/kubectl")

    proxy, peer = argv("proxy"), argv("peer")
    differ = [(a, b) for a, b in zip(proxy, peer) if a != b]

    assert len(proxy) == len(peer)
    assert all("proxy" in a and "peer" in b for a, b in differ)
    assert f"--ginkgo.focus={SELECTION.focus_regex}" in proxy
    assert f"--ginkgo.skip={SELECTION.skip_regex}" in proxy
    assert "--ginkgo.seed=42" in proxy and "--provider=skeleton" in proxy
    assert "--ginkgo.dry-run" not in proxy
    assert "--ginkgo.dry-run" in e2e_argv(binary=Path("e"), kubeconfig=Path("k"), report_dir=Path("r"),
                                          selection=SELECTION, seed=1, kubectl="k", dry_run=True)


@pytest.mark.parametrize(("text", "sides"), [
    ("proxy,peer", ("proxy", "peer")),
    ("peer, proxy", ("peer", "proxy")),
    ("peer", ("peer",)),
])
def test_sides_are_run_in_the_order_given(text: str, sides: tuple[str, ...]) -> None:
    assert parse_sides(text) == sides


@pytest.mark.parametrize("text", ["", "proxy,direct", "proxy,proxy", ","])
def test_unknown_or_repeated_sides_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_sides(text)


# -- nodes ----------------------------------------------------------------------------------------


def node(name: str, ready: str = "True", taints: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def test_nodes_wait_for_ready_and_for_the_lifecycle_controllers_taints_to_go() -> None:
    nodes: list[dict[str, Any]] = [node("rp1-kwok-1"), node("rp1-kwok-2", ready="Unknown"), node("rp1-hollow-1", taints=("partition-proxy.local/hollow",)),
             node("rp2-kwok-1", taints=("node.kubernetes.io/not-ready",)), {"metadata": {"name": "new"}}]

    assert not_ready_nodes(nodes) == ["rp1-kwok-2", "rp2-kwok-1", "new"]


def test_nodes_are_spread_over_the_resource_partitions_in_turn() -> None:
    assert [n.name for n in hollow_nodes(["rp1", "rp2"], 2, through_proxy=True)] == ["rp1-hollow-1", "rp2-hollow-1"]
    assert [(n.partition, n.through_proxy) for n in hollow_nodes(["rp3"], 2, through_proxy=False)] == [
        ("rp3", False), ("rp3", False)]
    assert re.findall(r'"name": "([^"]+)"', kwok_manifests(["rp1", "rp2"], 4)) == [
        "rp1-kwok-1", "rp2-kwok-1", "rp1-kwok-2", "rp2-kwok-2"]


def test_the_suites_kwok_pod_stages_are_make_runs_without_the_stage_that_completes_job_pods() -> None:
    text = (KWOK_DIR / "pod-stages.yaml").read_text()
    names = re.compile(r"(?m)^  name: (\S+)\s*$")
    kept = conformance.pod_stages_without(text, conformance.KWOK_DROPPED_STAGES)
    assert names.findall(text) == ["pod-ready", "pod-complete", "pod-delete"]
    assert names.findall(kept) == ["pod-ready", "pod-delete"]
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(kept) if d] == ["pod-ready", "pod-delete"]
