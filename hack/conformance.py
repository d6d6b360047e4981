"""`make conformance`: the official Kubernetes e2e suite (`k8s.io/kubernetes/test/e2e` v1.36.3,
built from the module pinned in hack/k8s as `.local/bin/e2e.test` by
`bash hack/build-components.sh conformance`) run through the proxy and against a single-cluster
peer in the same run, with the same spec selection, and a per-spec comparison of the two.

The shape is the density test's (bench/density.py): `Federation(tenant_partitions=2,
resource_partitions=3)`: tp1, tp2, rp1, rp2 behind one proxy (`ProxyProcess`, the proxy's default
config and worker count, as `make run`), and rp3, which the proxy does not front: the **peer**, a
plain single kube-apiserver cluster. The sides run one after the other (2 cores: at once, each
would be the other's load), each with its own control plane, stopped when its side ends:

- **proxy**: `ControlPlane` as `make run` starts it (per TP a kube-scheduler and a
  kube-controller-manager pinned to it, per RP a kube-controller-manager with the node
  controllers, kwok), `KWOK_NODES_PER_SIDE` kwok nodes (`rp1-kwok-1`, `rp2-kwok-1`, ...) and a
  kubemark hollow kubelet per RP; e2e.test with an admin kubeconfig through the proxy (user admin
  in group partition-proxy:admins, `Federation.issue_client_kubeconfig`);
- **peer**: `DirectControlPlane` on rp3 (the same controllers in one kube-controller-manager, one
  kube-scheduler, kwok), as many kwok nodes and hollow kubelets, straight at rp3; e2e.test with
  rp3's admin kubeconfig.

Both sides also run `EXTRA_CONTROLLERS`, the kube-controller-manager controllers that specs of
the selection wait for and `make run` does not start (one more kube-controller-manager per TP,
pinned to it, and one at the peer), so that those specs compare the proxy with the peer instead
of failing on both.

What runs: `SELECTION` (below), the same ginkgo focus and skip and the same `--ginkgo.seed` (so
the same order) on both sides, with `E2E_FLAGS`. Results: each side's JUnit XML
(`.local/conformance/<side>/junit_01.xml`), then a per-spec comparison (`compare`): both pass;
both fail (the environment: `environment_reason` names what the clusters lack when the failure
says so); **regressions** (pass at the peer, not through the proxy); peer-only failures. Printed as
markdown (also `.local/conformance/conformance.md`) and written as JSON
(`.local/conformance/conformance.json`). Exit code 1 if there is a regression, 0 otherwise
(2: the harness itself failed, e.g. a side wrote no report).

Owns: the selection, the e2e.test command line, JUnit parsing and the comparison (pure, tested in
tests/hack/test_conformance.py), and the processes of one run (every one stopped in a `finally`;
SIGTERM and Ctrl-C stop them too). Does not own: the federation, proxy and control-plane
launchers (hack/federation.py, hack/proxy_process.py, hack/controlplane.py), or building e2e.test.

Run: `python -m hack.conformance [--focus RE] [--skip RE] [--sides proxy,peer] [--keep]`;
`--dry-run` lists the selection (no clusters: `e2e.test --ginkgo.dry-run`).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

from hack.controlplane import KCM_USER, KWOK_CONFIGS, KWOK_DIR, ControlPlane, DirectControlPlane, HollowNode, kwok_node
from hack.federation import (
    DEFAULT_BIN_DIR,
    PROXY_ADMINS_GROUP,
    REPO,
    Federation,
    FederationError,
    find_kubectl,
)
from hack.procs import spawn, stop_process
from hack.proxy_process import ProxyProcess

K8S_VERSION = "v1.36.3"  # of e2e.test; keep in step with hack/k8s/go.mod and hack/build-components.sh
E2E_TEST = DEFAULT_BIN_DIR / "e2e.test"
OUT = REPO / ".local" / "conformance"

Side = Literal["proxy", "peer"]
SIDES: tuple[Side, ...] = ("proxy", "peer")
TENANT_PARTITIONS = ("tp1", "tp2")
RESOURCE_PARTITIONS = ("rp1", "rp2")
PROXIED = (*TENANT_PARTITIONS, *RESOURCE_PARTITIONS)
PEER = "rp3"  # the partition the proxy does not front: the peer cluster
KWOK_NODES_PER_SIDE = 4  # kwok nodes per side, spread over the side's RPs (2 per RP as `make run`)
HOLLOW_NODES_PER_SIDE = 2  # kubemark hollow kubelets per side (one per RP as `make run`)
NODES_READY_SECONDS = 120.0  # how long a side's nodes get to be Ready and untainted
# The whole e2e.test run of one side (ginkgo's own default is 1 h). Some specs poll without a
# timeout of their own (the ValidatingAdmissionPolicy type checks), so a spec that hangs ends
# only with the suite; the full selection takes well under this (README, "Conformance").
E2E_SUITE_TIMEOUT_SECONDS = 3 * 3600
E2E_STOP_GRACE_SECONDS = 600.0  # after the suite timeout: ginkgo's own interrupt and report

# kube-controller-manager controllers that specs of SELECTION need and hack/controlplane.py's
# TP_CONTROLLERS do not run, with their bootstrap roles (system:controller:<role>): resource
# quota status (the ResourceQuota specs wait a minute each for it), ReplicationController pods
# (the RC and garbage-collector specs), ValidatingAdmissionPolicy type checking (its specs poll
# for status.typeChecking with no timeout).
EXTRA_CONTROLLERS = {
    "resourcequota-controller": "resourcequota-controller",
    "replicationcontroller-controller": "replication-controller",
    "validatingadmissionpolicy-status-controller": "validatingadmissionpolicy-status-controller",
    # the finalizers of PVCs, PVs and VolumeAttributesClasses: without them a deleted one stays
    # (the PV/PVC lifecycle, VolumeAttributesClass lifecycle and ResourceQuota PVC specs)
    "persistentvolumeclaim-protection-controller": "pvc-protection-controller",
    "persistentvolume-protection-controller": "pv-protection-controller",
    "volumeattributesclass-protection-controller": "volumeattributesclass-protection-controller",
}


@dataclass(frozen=True, slots=True)
class Selection:
    """A ginkgo spec selection: a spec runs when its full text (container texts, spec text and
    the `[Label]` tags the e2e framework writes into it) matches one of `focus` and none of
    `skip` (ginkgo's --focus/--skip, RE2 regular expressions)."""

    focus: tuple[str, ...]
    skip: tuple[str, ...]

    @property
    def focus_regex(self) -> str:
        return _union(self.focus)

    @property
    def skip_regex(self) -> str:
        return _union(self.skip)

    def narrowed(self, *, focus: str | None = None, skip: str | None = None) -> Selection:
        """`focus` replaces the focus (the skip still applies); `skip` adds to the skip."""
        return Selection(focus=(focus,) if focus else self.focus, skip=(*self.skip, skip) if skip else self.skip)


def _union(patterns: Sequence[str]) -> str:
    return "|".join(f"(?:{p})" for p in patterns)


# THE SELECTION: the API machinery specs, and the conformance specs of the other SIGs that only
# create, read, update, patch, list, watch and delete API objects (their names say so: "API
# operations", "lifecycle", "status", "a collection", ...). Skipped: [Serial], [Disruptive],
# [Slow], [Flaky]; feature specs not enabled by default ([Feature:...], which includes
# [Feature:OffByDefault], and [Alpha]; a [FeatureGate:X] spec of a GA or default-on beta gate
# runs); specs that need a real node ([NodeConformance], [MinimumKubeletVersion:...]); and the
# API machinery specs that talk to a server running in a container (webhooks, conversion
# webhooks, the sample aggregated API server). Pods are created by several selected specs and
# run on kwok nodes (Running and Ready, nothing executes). `python -m hack.conformance --dry-run`
# lists it: 201 specs of 7,579 (129 API machinery, 72 of other SIGs).
SELECTION = Selection(
    focus=(
        r"\[sig-api-machinery\]",
        r"\[sig-apps\] .*(API operations|Status endpoints|status|a collection|lifecycle|scale subresource"
        r"|ReplicationController scale|Replace and Patch|should delete a job|should create a PodDisruptionBudget)"
        r".*\[Conformance\]",
        r"\[sig-auth\] .*(API operations|lifecycle of a ServiceAccount|update a ServiceAccount|serviceAccountToken"
        r"|kube-root-ca\.crt).*\[Conformance\]",
        r"\[sig-instrumentation\] .*\[Conformance\]",
        r"\[sig-network\] .*(API operations|lifecycle of an Endpoint|service status lifecycle|a collection of services"
        r"|find a service from listing|secure master service).*\[Conformance\]",
        r"\[sig-node\] .*(API operations|lease API|CRUD Tests|lifecycle of (a node|PodTemplates|Pods and PodStatus)"
        r"|ConfigMap lifecycle|a collection|pod template|patch a|empty( secret)? key|QOS Class).*\[Conformance\]",
        r"\[sig-scheduling\] LimitRange .*\[Conformance\]",
        r"\[sig-storage\] .*(API operations|lifecycle|status|in Pod API|immutable).*\[Conformance\]",
    ),
    skip=(
        r"\[Serial\]|\[Disruptive\]|\[Slow\]|\[Flaky\]|\[Feature:|\[Alpha\]",
        r"\[NodeConformance\]|\[MinimumKubeletVersion:",
        r"\[sig-api-machinery\] (AdmissionWebhook|CustomResourceConversionWebhook|Aggregator) ",
    ),
)

# e2e.test flags for clusters of kwok nodes and hollow kubelets (framework flags:
# test/e2e/framework/test_context.go of k8s.io/kubernetes v1.36.3).
E2E_FLAGS = (
    "--provider=skeleton",
    # hollow kubelets carry a NoSchedule taint (hack/controlplane.py HOLLOW_TAINT): without this
    # the suite would wait for them to become schedulable before starting.
    "--non-blocking-taints=node-role.kubernetes.io/control-plane,partition-proxy.local/hollow",
    "--node-schedulable-timeout=3m",  # the harness waits for Ready nodes first; fail fast if they flap
    "--minStartupPods=0",  # no system pods in kube-system (no DNS, no CNI)
    "--disable-log-dump",  # no node logs to collect (and no SSH)
    "--ginkgo.no-color",
    "--ginkgo.v",  # each step in the log (.local/conformance/<side>/e2e.log, kept with --keep)
)


def e2e_argv(*, binary: Path, kubeconfig: Path, report_dir: Path, selection: Selection, seed: int,
             kubectl: str, dry_run: bool = False) -> list[str]:
    """The e2e.test command line of one side: same selection, seed and flags on both sides."""
    argv = [
        str(binary), f"--kubeconfig={kubeconfig}", f"--report-dir={report_dir}", f"--e2e-output-dir={report_dir}",
        f"--kubectl-path={kubectl}", f"--ginkgo.focus={selection.focus_regex}", f"--ginkgo.seed={seed}",
        f"--ginkgo.timeout={E2E_SUITE_TIMEOUT_SECONDS}s", *E2E_FLAGS,
    ]
    if selection.skip:
        argv.append(f"--ginkgo.skip={selection.skip_regex}")
    if dry_run:
        argv.append("--ginkgo.dry-run")
    return argv


# -- JUnit reports (the e2e framework's, test/e2e/framework/internal/junit) ----------------------

# passed, failed; skipped: the spec skipped itself (e2eskipper, with a reason); not_run: ginkgo
# did not run it (left out by the selection, or the suite ended first: a suite timeout, a failed
# [SynchronizedBeforeSuite]; such a spec is reported as a bare "skipped", or not at all).
State = Literal["passed", "failed", "skipped", "not_run"]
# ginkgo's spec states (types.SpecState.String()) by what they mean for a comparison.
_FAILED_STATES = frozenset({"failed", "timedout", "panicked", "interrupted", "aborted"})
_SKIPPED_STATES = frozenset({"skipped", "pending"})
_TAG = re.compile(r"^\[(FAILED|TIMEDOUT|PANICKED|INTERRUPTED|ABORTED)\]\s*")


@dataclass(frozen=True, slots=True)
class SpecResult:
    """One spec of one side: its full text, state, run time (seconds) and what the report says
    of a failure (the whole text), a skip (the message) or why it did not run."""

    name: str
    state: State
    seconds: float
    ginkgo_state: str = ""  # ginkgo's own word: failed, timedout, panicked, ...
    failure: str = ""

    @property
    def first_line(self) -> str:
        """The failure's first line without ginkgo's [FAILED] tag (or the skip message)."""
        for line in self.failure.splitlines():
            if line := _TAG.sub("", line).strip():
                return line
        return ""


@dataclass(frozen=True, slots=True)
class SideReport:
    """A side's JUnit report: the specs (by full text, the "[It] " prefix removed), the suite
    nodes that failed ([SynchronizedBeforeSuite] and the like: their failure runs no spec) and
    ginkgo's reasons for a failed suite ("Suite Timeout Elapsed", ...)."""

    specs: Mapping[str, SpecResult]
    suite_failures: tuple[SpecResult, ...] = ()
    suite_failure_reasons: tuple[str, ...] = ()
    seconds: float = 0.0  # the suite's own run time

    def count(self, state: State) -> int:
        return sum(1 for s in self.specs.values() if s.state == state)

    @property
    def why_not_run(self) -> str:
        """What ended the suite early, for the specs it did not run ("" if nothing did)."""
        reasons = [f"{f.name} failed: {f.first_line}" for f in self.suite_failures] + list(self.suite_failure_reasons)
        return "; ".join(reasons)


def parse_junit(text: str | bytes) -> SideReport:
    """Parse the JUnit XML ginkgo writes (`reporters.GenerateJUnitReportWithConfig`, as the e2e
    framework calls it for --report-dir): `<testsuites><testsuite><properties/><testcase name
    status time>` with `<failure>`, `<error>` or `<skipped message>` inside. Raises ValueError for
    XML that is not such a report."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"not XML: {e}") from e
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError(f"not a JUnit report: root element <{root.tag}>")
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    specs: dict[str, SpecResult] = {}
    suite_failures: list[SpecResult] = []
    reasons: list[str] = []
    seconds = 0.0
    for suite in suites:
        seconds += float(suite.get("time") or 0)
        reasons += [v for prop in suite.iter("property")
                    if prop.get("name") == "SpecialSuiteFailureReason" and (v := prop.get("value") or "")]
        for case in suite.iter("testcase"):
            result = _spec_result(case)
            if result.name.startswith("[It] "):
                name = result.name[len("[It] "):]
                key, n = name, 1
                while key in specs:  # two specs with one text: keep both
                    n += 1
                    key = f"{name} (#{n})"
                specs[key] = SpecResult(key, result.state, result.seconds, result.ginkgo_state, result.failure)
            elif result.state == "failed":
                suite_failures.append(result)
    return SideReport(specs=specs, suite_failures=tuple(suite_failures), suite_failure_reasons=tuple(reasons),
                      seconds=seconds)


def _spec_result(case: ET.Element) -> SpecResult:
    name = case.get("name") or ""
    ginkgo_state = case.get("status") or ""
    failure = case.find("failure")
    if failure is None:
        failure = case.find("error")
    skipped = case.find("skipped")
    state: State
    text = ""
    if failure is not None or ginkgo_state in _FAILED_STATES:
        state = "failed"
        if failure is not None:
            text = (failure.text or "").strip() or failure.get("message") or ""
    elif skipped is not None or ginkgo_state in _SKIPPED_STATES:
        text = (skipped.get("message") if skipped is not None else "") or ""
        # ginkgo writes "skipped - <reason>" for a spec that called Skip, a bare "skipped" for
        # one it did not run (reporters/junit_report.go).
        state = "skipped" if text.startswith("skipped - ") else "not_run"
    else:
        state = "passed"
    return SpecResult(name, state, float(case.get("time") or 0), ginkgo_state or state, text)


# -- the comparison --------------------------------------------------------------------------

Category = Literal["regression", "peer_only", "both_fail", "both_pass", "neither_ran", "one_side"]
CATEGORIES: tuple[Category, ...] = ("regression", "peer_only", "both_fail", "both_pass", "neither_ran", "one_side")
CATEGORY_TITLES: Mapping[Category, str] = {
    "regression": "regressions: fail through the proxy, pass at the peer",
    "peer_only": "peer-only failures: pass through the proxy, fail at the peer",
    "both_fail": "both fail: the environment",
    "both_pass": "both pass",
    "neither_ran": "ran on neither side (skipped by the spec, or the suites ended first)",
    "one_side": "one side only (the other side was not run)",
}

# What a failure says the clusters lack, first match wins (searched in the failure text of the
# peer, then of the proxy). The clusters have no container runtime (kwok and hollow kubelets),
# no cluster DNS, no CNI, no kube-proxy, and only the controllers of hack/controlplane.py.
ENVIRONMENT_REASONS: tuple[tuple[str, str], ...] = (
    (r"failed calling webhook|no endpoints available for service|error trying to reach service"
     r"|waiting for service \S+ have \d+ endpoints?",
     "needs a server in a container (webhook or aggregated API): no container runtime"),
    (r"unable to upgrade connection|exec .*failed|error executing command|ExecWithOptions",
     "needs exec in a container: no container runtime"),
    (r"failed to get logs|GetPodLogs|container logs|previous terminated container",
     "needs container logs: no container runtime"),
    (r"\bDNS\b|nslookup|dig\b|resolv\.conf", "needs cluster DNS"),
    (r"connection refused|i/o timeout|no route to host|dial tcp", "needs pod networking: no CNI, no kube-proxy"),
    (r"[Ee]ndpoints?(Slice)? .*(not|never).*(created|found|ready)", "needs the endpoints controllers (not run)"),
    (r"not all in phase Bound", "needs a volume provisioner: no storage"),
    (r"[Jj]ob .*(to complete|completion)|for job to complete",
     "needs Job pods that end: kwok's stages in make conformance never end a Job's pod"),
    (r"pods? .*(not|never).*(running|ready|succeeded|Succeeded|Running)|timed out waiting for (the )?pod",
     "needs pods to run containers: kwok only simulates them"),
)


def environment_reason(*failures: str) -> str:
    """The first ENVIRONMENT_REASONS reason any of `failures` matches, else "unclassified"."""
    for pattern, reason in ENVIRONMENT_REASONS:
        if any(re.search(pattern, text) for text in failures if text):
            return reason
    return "unclassified: see the failure"


@dataclass(frozen=True, slots=True)
class Row:
    """One spec of the comparison: its category and each side's result (None: side not run or
    spec not in its report); `note` is the environment reason of a spec both sides fail."""

    name: str
    category: Category
    proxy: SpecResult | None
    peer: SpecResult | None
    note: str = ""


def classify(proxy: SpecResult | None, peer: SpecResult | None) -> Category:
    """A spec's category. A spec that did not pass counts as failed when the other side ran it:
    a spec skipped through the proxy (a discovery check the proxy answers differently) or not
    run there (the suite ended first) but passed at the peer is a regression."""
    if proxy is None or peer is None:
        return "one_side"
    ran = ("passed", "failed")
    if proxy.state not in ran and peer.state not in ran:
        return "neither_ran"
    proxy_ok, peer_ok = proxy.state == "passed", peer.state == "passed"
    if proxy_ok and peer_ok:
        return "both_pass"
    if peer_ok:
        return "regression"
    if proxy_ok:
        return "peer_only"
    return "both_fail"


def compare(reports: Mapping[Side, SideReport], *, selected: Collection[str] | None = None) -> list[Row]:
    """Every selected spec, classified, sorted by category (CATEGORIES order) then name.
    `selected`: the specs of the run's selection (`e2e.test --ginkgo.dry-run`); a selected spec a
    side's report lacks did not run there. Without it, the specs some side did not leave out."""
    if selected is None:
        selected = {name for r in reports.values() for name, s in r.specs.items() if s.state != "not_run"}
    rows = []
    for name in sorted(selected):
        results = {side: _result_of(report, name) for side, report in reports.items()}
        p, q = results.get("proxy"), results.get("peer")
        category = classify(p, q)
        note = environment_reason(q.failure if q else "", p.failure if p else "") if category == "both_fail" else ""
        rows.append(Row(name, category, p, q, note))
    return sorted(rows, key=lambda r: (CATEGORIES.index(r.category), r.name))


def _result_of(report: SideReport, name: str) -> SpecResult:
    result = report.specs.get(name)
    if result is None or (result.state == "not_run" and report.why_not_run):
        return SpecResult(name, "not_run", 0.0, "not run", report.why_not_run or "not in the report")
    return result


def side_counts(rows: Iterable[Row], side: Side) -> dict[State, int]:
    """A side's selected specs per state."""
    c = Counter(r.state for row in rows if (r := row.proxy if side == "proxy" else row.peer) is not None)
    states: tuple[State, ...] = ("passed", "failed", "skipped", "not_run")
    return {state: c.get(state, 0) for state in states}


def counts(rows: Iterable[Row]) -> dict[Category, int]:
    """Specs per category (every category, zeros included)."""
    c = Counter(r.category for r in rows)
    return {cat: c.get(cat, 0) for cat in CATEGORIES}


def exit_code(rows: Iterable[Row]) -> int:
    """1 if any spec is a regression, else 0."""
    return 1 if any(r.category == "regression" for r in rows) else 0


@dataclass(frozen=True, slots=True)
class SideRun:
    """What a harness run measured of one side (seconds of wall time)."""

    report: SideReport
    e2e_seconds: float
    setup_seconds: float = 0.0
    junit: str = ""


def _state(r: SpecResult | None) -> str:
    return "-" if r is None else (r.ginkgo_state if r.state == "failed" else r.state)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _cell(text: str, limit: int = 160) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_markdown(rows: Sequence[Row], sides: Mapping[Side, SideRun], *, selection: Selection, seed: int) -> str:
    """The run as markdown: per side (selected specs run, passed, failed, skipped, not run, wall
    times), counts per category, the regressions, peer-only and environment failures with their
    failure's first line, then every selected spec."""
    out = [f"## Conformance: k8s.io/kubernetes/test/e2e {K8S_VERSION}, through the proxy and at the peer", ""]
    out += ["| side | specs run | passed | failed | skipped | not run | e2e.test wall time | set-up |",
            "|---|---|---|---|---|---|---|---|"]
    for side, run in sides.items():
        c = side_counts(rows, side)
        out.append(f"| {side} | {c['passed'] + c['failed']} | {c['passed']} | {c['failed']} | {c['skipped']} | "
                   f"{c['not_run']} | {_duration(run.e2e_seconds)} | {_duration(run.setup_seconds)} |")
    for side, run in sides.items():
        if run.report.why_not_run:
            out += ["", f"{side}: the suite ended early: {_cell(run.report.why_not_run, 400)}"]
    out += ["", "| category | specs |", "|---|---|"]
    out += [f"| {CATEGORY_TITLES[cat]} | {n} |" for cat, n in counts(rows).items() if n]
    sections: tuple[tuple[Category, str], ...] = (
        ("regression", "through the proxy (first line) |"),
        ("peer_only", "at the peer (first line) |"),
        ("both_fail", "environment | at the peer (first line) |"),
    )
    for cat, columns in sections:
        chosen = [r for r in rows if r.category == cat]
        if not chosen:
            continue
        out += ["", f"### {CATEGORY_TITLES[cat]} ({len(chosen)})", "",
                f"| spec | {columns}", "|---|---|" + ("---|" if cat == "both_fail" else "")]
        for r in chosen:
            if cat == "regression":
                out.append(f"| {_cell(r.name, 200)} | {_cell(r.proxy.first_line if r.proxy else '')} |")
            elif cat == "peer_only":
                out.append(f"| {_cell(r.name, 200)} | {_cell(r.peer.first_line if r.peer else '')} |")
            else:
                out.append(f"| {_cell(r.name, 200)} | {r.note} | {_cell(r.peer.first_line if r.peer else '')} |")
    out += ["", f"### every spec ({len(rows)})", "", "| spec | proxy | peer | category |", "|---|---|---|---|"]
    out += [f"| {_cell(r.name, 200)} | {_state(r.proxy)} | {_state(r.peer)} | {r.category} |" for r in rows]
    out += ["", f"Selection: focus `{selection.focus_regex}`, skip `{selection.skip_regex}`; ginkgo seed {seed}.", ""]
    return "\n".join(out)


def _result_json(r: SpecResult | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"state": r.state, "ginkgo_state": r.ginkgo_state, "seconds": round(r.seconds, 3),
            "first_line": r.first_line, "failure": r.failure if r.state == "failed" else ""}


def result_json(rows: Sequence[Row], sides: Mapping[Side, SideRun], *, selection: Selection, seed: int) -> dict[str, Any]:
    """The run as JSON (`.local/conformance/conformance.json`)."""
    def side_json(side: Side, run: SideRun) -> dict[str, Any]:
        c = side_counts(rows, side)
        return {"specs_run": c["passed"] + c["failed"], **{str(state): n for state, n in c.items()},
                "e2e_seconds": round(run.e2e_seconds, 1), "setup_seconds": round(run.setup_seconds, 1),
                "suite_seconds": round(run.report.seconds, 1), "junit": run.junit, "ended_early": run.report.why_not_run}

    return {
        "e2e": f"k8s.io/kubernetes/test/e2e {K8S_VERSION}",
        "selection": {"focus": selection.focus_regex, "skip": selection.skip_regex, "specs": len(rows)},
        "seed": seed,
        "sides": {side: side_json(side, run) for side, run in sides.items()},
        "counts": counts(rows),
        "regressions": [r.name for r in rows if r.category == "regression"],
        "specs": [{"name": r.name, "category": r.category, "environment": r.note,
                   "proxy": _result_json(r.proxy), "peer": _result_json(r.peer)} for r in rows],
    }


def parse_sides(text: str) -> tuple[Side, ...]:
    """`--sides`: a comma-separated list of SIDES, in run order, each at most once. Raises ValueError."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    sides = tuple(s for s in SIDES for n in names if n == s)
    if not names or len(sides) != len(names) or len(set(names)) != len(names):
        raise ValueError(f"--sides {text!r}: a comma-separated list of {', '.join(SIDES)}, each at most once")
    return tuple(sorted(sides, key=names.index))


def not_ready_nodes(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the Nodes (decoded JSON) that are not Ready=True or carry a node.kubernetes.io/*
    taint (not-ready, unreachable: the node lifecycle controller's, lifted once Ready)."""
    out = []
    for node in nodes:
        conditions = node.get("status", {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        tainted = any(str(t.get("key", "")).startswith("node.kubernetes.io/") for t in node.get("spec", {}).get("taints") or [])
        if not ready or tainted:
            out.append(str(node.get("metadata", {}).get("name", "?")))
    return out


# -- I/O: the run ----------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def extra_controllers_rbac_yaml() -> str:
    """ClusterRoleBindings of kube-controller-manager's user to the bootstrap roles of
    EXTRA_CONTROLLERS (as hack/controlplane.py binds its controllers' roles)."""
    return "---\n".join(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n"
        f"metadata: {{name: 'partition-proxy:kube-controller-manager:{role}'}}\n"
        f"roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: 'system:controller:{role}'}}\n"
        f"subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: '{KCM_USER}'}}]\n"
        for role in sorted(set(EXTRA_CONTROLLERS.values()))
    )


def _apply_extra_rbac(fed: Federation, partitions: Sequence[str]) -> None:
    for name in partitions:
        r = subprocess.run([find_kubectl(), "--kubeconfig", str(fed.partition(name).admin_kubeconfig), "apply", "-f", "-"],
                           input=extra_controllers_rbac_yaml(), capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise FederationError(f"kubectl apply (extra controller RBAC) on {name}: {r.stderr.strip()}")


# kwok's pod stages for the suite: those of `make run` (hack/kwok/pod-stages.yaml) without
# `pod-complete`, which turns a Job's pod Succeeded at once. The Job specs of the selection run
# pods that never end (e2ejob "notTerminate") and wait up to 15 minutes each for them to be
# Running; on a kubelet they are, with kwok's fast stages they never are.
KWOK_DROPPED_STAGES = ("pod-complete",)


def pod_stages_without(text: str, dropped: Collection[str]) -> str:
    """The kwok stage documents of `text` (YAML documents separated by `---` lines) except the
    Stages named in `dropped`."""
    docs = re.split(r"(?m)^---\s*$", text)
    kept = [d for d in docs if not any(re.search(rf"(?m)^  name: {re.escape(name)}\s*$", d) for name in dropped)]
    return "---".join(kept)


def conformance_kwok_configs(directory: Path) -> tuple[Path, ...]:
    """KWOK_CONFIGS with the pod stages written to `directory` without KWOK_DROPPED_STAGES."""
    stages = directory / "kwok-pod-stages.yaml"
    stages.write_text(pod_stages_without((KWOK_DIR / "pod-stages.yaml").read_text(), KWOK_DROPPED_STAGES))
    return tuple(stages if config.name == "pod-stages.yaml" else config for config in KWOK_CONFIGS)


class ProxySideControlPlane(ControlPlane):
    """`ControlPlane` (as `make run`) plus, per TP, a kube-controller-manager pinned to it
    running EXTRA_CONTROLLERS."""

    def start(self, timeout: float = 120.0) -> ProxySideControlPlane:
        super().start(timeout)
        try:
            deadline = time.monotonic() + timeout
            tps = [name for name in self.partitions if self.fed.partition(name).role == "tenant"]
            _apply_extra_rbac(self.fed, tps)
            self._wait_healthy([
                self._controller_manager(f"kube-controller-manager-extra-{tp}",
                                         self._pinned(f"kube-controller-manager-extra-{tp}", tp, KCM_USER),
                                         tuple(EXTRA_CONTROLLERS))
                for tp in tps
            ], https=True, deadline=deadline)
        except BaseException:
            self.stop()
            raise
        return self


class PeerControlPlane(DirectControlPlane):
    """`DirectControlPlane` plus a kube-controller-manager running EXTRA_CONTROLLERS, straight
    at the peer."""

    def start(self, timeout: float = 120.0) -> PeerControlPlane:
        super().start(timeout)
        try:
            deadline = time.monotonic() + timeout
            _apply_extra_rbac(self.fed, [self.partition])
            kubeconfig = self._kubeconfig("kube-controller-manager-extra", server=self.fed.partition(self.partition).server,
                                          user=KCM_USER)
            self._wait_healthy([self._controller_manager("kube-controller-manager-extra", kubeconfig, tuple(EXTRA_CONTROLLERS))],
                               https=True, deadline=deadline)
        except BaseException:
            self.stop()
            raise
        return self


def kwok_manifests(rps: Sequence[str], count: int) -> str:
    """`count` kwok nodes spread over `rps` in turn: <rp>-kwok-1, ... (JSON documents)."""
    names = [f"{rps[i % len(rps)]}-kwok-{i // len(rps) + 1}" for i in range(count)]
    return "---\n".join(json.dumps(kwok_node(name)) + "\n" for name in names)


def hollow_nodes(rps: Sequence[str], count: int, *, through_proxy: bool) -> list[HollowNode]:
    """`count` hollow kubelets spread over `rps` in turn: <rp>-hollow-1, ..."""
    return [HollowNode(f"{rps[i % len(rps)]}-hollow-{i // len(rps) + 1}", rps[i % len(rps)], through_proxy=through_proxy)
            for i in range(count)]


def wait_nodes_ready(kubeconfig: Path, *, expected: int, timeout: float) -> None:
    """Poll until `expected` Nodes exist and every one is Ready and untainted by the node
    lifecycle controller. Raises FederationError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        r = subprocess.run([find_kubectl(), "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "json"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            items = json.loads(r.stdout)["items"]
            pending = not_ready_nodes(items)
            if len(items) >= expected and not pending:
                return
            last = f"{len(items)}/{expected} nodes, not ready or tainted: {pending}"
        else:
            last = r.stderr.strip()
        time.sleep(1.0)
    raise FederationError(f"nodes not Ready and untainted after {timeout:.0f} s: {last}")


def run_e2e(argv: Sequence[str], *, log_path: Path, timeout: float) -> float:
    """Run e2e.test with its output in `log_path`; returns its wall time (seconds). The process
    (its own session, killed with the harness) is stopped if anything interrupts the wait."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    proc = spawn(argv, log=log_path, cwd=log_path.parent)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log(f"e2e.test still running {timeout:.0f} s after it started (its --ginkgo.timeout passed): stopping it")
    finally:
        stop_process(proc, grace=30)
    return time.monotonic() - start


def _kubectl_apply(kubeconfig: Path, manifests: str) -> None:
    r = subprocess.run([find_kubectl(), "--kubeconfig", str(kubeconfig), "apply", "-f", "-"], input=manifests,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise FederationError(f"kubectl apply: {r.stderr.strip()}")


@dataclass
class Run:
    """One harness run: its federation, proxy and the control plane of the side running."""

    root: Path
    selection: Selection
    seed: int
    sides: tuple[Side, ...]
    workers: int | None
    fed: Federation = field(init=False)
    proxy: ProxyProcess | None = None
    plane: ControlPlane | DirectControlPlane | None = None

    def __post_init__(self) -> None:
        self.fed = Federation(self.root / "federation", tenant_partitions=len(TENANT_PARTITIONS),
                              resource_partitions=len(RESOURCE_PARTITIONS) + 1)

    def start(self) -> None:
        deferred = [*([] if "proxy" in self.sides else PROXIED), *([] if "peer" in self.sides else [PEER])]
        log(f"starting the federation ({', '.join(PROXIED)} behind the proxy; {PEER} the peer"
            f"{'; not started: ' + ', '.join(deferred) if deferred else ''})")
        self.fed.start(deferred=deferred)
        if "proxy" in self.sides:
            self.proxy = ProxyProcess(self.fed, self.root / "federation" / "proxy", partitions=list(PROXIED),
                                      workers=self.workers).start(timeout=120)

    def stop(self) -> None:
        if self.plane is not None:
            self.plane.stop()
            self.plane = None
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        self.fed.stop()

    def run_side(self, side: Side) -> SideRun:
        """Start the side's control plane and nodes, run e2e.test, stop the control plane."""
        directory = self.root / side
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        t0 = time.monotonic()
        if side == "proxy":
            assert self.proxy is not None
            rps = list(RESOURCE_PARTITIONS)
            kubeconfig = self.fed.issue_client_kubeconfig("conformance-admin", user="admin", groups=[PROXY_ADMINS_GROUP],
                                                          server=self.proxy.server)
            log(f"[{side}] starting the control plane through the proxy at {self.proxy.server}")
            self.plane = ProxySideControlPlane(
                self.fed, self.proxy, hollow_nodes=hollow_nodes(rps, HOLLOW_NODES_PER_SIDE, through_proxy=True))
            self.plane.kwok_configs = conformance_kwok_configs(directory)
            self.plane.start(timeout=180)
        else:
            rps = [PEER]
            kubeconfig = self.fed.partition(PEER).admin_kubeconfig
            log(f"[{side}] starting the control plane straight at {PEER}")
            peer_plane = PeerControlPlane(self.fed, PEER)
            peer_plane.kwok_configs = conformance_kwok_configs(directory)
            self.plane = peer_plane
            peer_plane.start(timeout=180)
            peer_plane.start_hollow_nodes(hollow_nodes(rps, HOLLOW_NODES_PER_SIDE, through_proxy=False), timeout=120)
        _kubectl_apply(kubeconfig, kwok_manifests(rps, KWOK_NODES_PER_SIDE))
        wait_nodes_ready(kubeconfig, expected=KWOK_NODES_PER_SIDE + HOLLOW_NODES_PER_SIDE, timeout=NODES_READY_SECONDS)
        setup = time.monotonic() - t0
        log(f"[{side}] control plane and {KWOK_NODES_PER_SIDE + HOLLOW_NODES_PER_SIDE} nodes ready in {setup:.0f} s; "
            f"running e2e.test (log: {directory / 'e2e.log'})")
        argv = e2e_argv(binary=E2E_TEST, kubeconfig=kubeconfig, report_dir=directory, selection=self.selection,
                        seed=self.seed, kubectl=find_kubectl())
        (directory / "e2e.argv").write_text("\n".join(argv) + "\n")
        try:
            seconds = run_e2e(argv, log_path=directory / "e2e.log", timeout=E2E_SUITE_TIMEOUT_SECONDS + E2E_STOP_GRACE_SECONDS)
        finally:
            if self.plane is not None:
                for proc in self.plane.group.exited():
                    log(f"[{side}] WARNING: {proc.name} exited with {proc.popen.returncode} during the run; see {proc.log}")
                self.plane.stop()
                self.plane = None
        junit = directory / "junit_01.xml"
        if not junit.exists():
            raise FederationError(f"[{side}] e2e.test wrote no report ({junit}); see {directory / 'e2e.log'}")
        report = parse_junit(junit.read_bytes())
        log(f"[{side}] e2e.test ended after {seconds / 60:.1f} min: {report.count('passed')} specs passed, "
            f"{report.count('failed')} failed{'; ' + report.why_not_run if report.why_not_run else ''}")
        return SideRun(report=report, e2e_seconds=seconds, setup_seconds=setup, junit=str(junit.relative_to(REPO)))


def selected_specs(selection: Selection) -> tuple[list[str], int]:
    """The specs `selection` holds (`e2e.test --ginkgo.dry-run`: no cluster, seconds) and the
    suite's total. Raises FederationError when e2e.test writes no report."""
    with tempfile.TemporaryDirectory(prefix="conformance-dry-run-") as tmp:
        argv = e2e_argv(binary=E2E_TEST, kubeconfig=Path(tmp) / "none.yaml", report_dir=Path(tmp), selection=selection,
                        seed=1, kubectl=find_kubectl(), dry_run=True)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        junit = Path(tmp) / "junit_01.xml"
        if not junit.exists():
            raise FederationError(f"e2e.test --ginkgo.dry-run wrote no report:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        report = parse_junit(junit.read_bytes())
    return sorted(name for name, s in report.specs.items() if s.state == "passed"), len(report.specs)


def dry_run(selection: Selection) -> int:
    """Print the specs `selection` holds and their count per SIG."""
    selected, total = selected_specs(selection)
    by_sig = Counter(name.split("]")[0] + "]" for name in selected)
    for name in selected:
        print(name)
    print(f"\n{len(selected)} of {total} specs selected: "
          + ", ".join(f"{sig} {n}" for sig, n in sorted(by_sig.items(), key=lambda kv: (-kv[1], kv[0]))))
    return 0


def _on_sigterm(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--focus", help="a ginkgo regular expression that replaces the selection's focus "
                                        "(its skip still applies), e.g. 'health handlers'")
    parser.add_argument("--skip", help="a ginkgo regular expression of specs to skip besides the selection's skip")
    parser.add_argument("--sides", default=",".join(SIDES), help="which sides to run, in order (default: proxy,peer)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the logs (e2e.test's, every component's) and the federation's state directory")
    parser.add_argument("--workers", type=int, default=None, help="proxy worker processes (default: the proxy's, one per CPU)")
    parser.add_argument("--seed", type=int, default=None, help="ginkgo's random seed (default: a new one; printed)")
    parser.add_argument("--dry-run", action="store_true", help="list the selected specs and their count, start nothing")
    args = parser.parse_args(argv)

    selection = SELECTION.narrowed(focus=args.focus, skip=args.skip)
    try:
        sides = parse_sides(args.sides)
    except ValueError as e:
        parser.error(str(e))
    if not E2E_TEST.exists():
        parser.error(f"{E2E_TEST} missing: run `bash hack/build-components.sh conformance`")
    if args.dry_run:
        return dry_run(selection)

    selected, _ = selected_specs(selection)
    if not selected:
        parser.error("the selection holds no spec (see --dry-run)")
    seed = args.seed if args.seed is not None else random.randrange(1, 2**31)
    log(f"{len(selected)} specs selected; sides {', '.join(sides)}; ginkgo seed {seed}")
    signal.signal(signal.SIGTERM, _on_sigterm)
    OUT.mkdir(parents=True, exist_ok=True)
    run = Run(root=OUT, selection=selection, seed=seed, sides=sides, workers=args.workers)
    results: dict[Side, SideRun] = {}
    started = time.monotonic()
    try:
        run.start()
        for side in run.sides:
            results[side] = run.run_side(side)
    except FederationError as e:
        log(f"the harness failed: {e}")
        return 2
    finally:
        run.stop()
        if not args.keep:
            shutil.rmtree(OUT / "federation", ignore_errors=True)
            for side in sides:
                (OUT / side / "e2e.log").unlink(missing_ok=True)
    rows = compare({side: run.report for side, run in results.items()}, selected=selected)
    markdown = render_markdown(rows, results, selection=selection, seed=seed)
    (OUT / "conformance.md").write_text(markdown)
    (OUT / "conformance.json").write_text(json.dumps(result_json(rows, results, selection=selection, seed=seed), indent=2) + "\n")
    print(markdown, flush=True)
    c = counts(rows)
    log(f"done in {(time.monotonic() - started) / 60:.1f} min: {len(rows)} specs, {c['both_pass']} both pass, "
        f"{c['regression']} regressions, {c['peer_only']} peer-only failures, {c['both_fail']} both fail; "
        f"{OUT / 'conformance.json'}")
    return exit_code(rows)


if __name__ == "__main__":
    sys.exit(main())
