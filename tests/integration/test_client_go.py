"""Real client-go programs as clients: hack/k8s/clients/rvcheck, built from the pinned
Kubernetes module (hack/build-components.sh), speaking protobuf like every kubelet or JSON, and
writing back the resourceVersions they read. Each test runs the program through the proxy AND
straight against the owning partition in the same test; the direct run is the reference.

- `leases`: a Lease informer on kube-node-lease plus one renewer per named Lease, renewing the
  way the kubelet's node lease controller does (UPDATE from the object last read or returned).
- `pods`: one pod through GET, UPDATE, UpdateStatus, every patch type with a resourceVersion
  precondition (current, then stale), DELETE with preconditions and a final GET.

The invariant checked is docs/resource-versions.md's: every RV a client gets through the proxy is
a valid KEP-5504 RV (a positive decimal integer of at most 128 bits) and never a native one, and
every RV the client writes back is translated to the owner's native RV in every encoding.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.federation import Kube
from tests.goclients import finish_rvcheck, reap_rvcheck, run_rvcheck, start_rvcheck

LEASE_NAMESPACE = "kube-node-lease"
LEASE_RUN_SECONDS = 30  # how long each `leases` run renews (the figure)
LEASE_INTERVAL_SECONDS = 1  # renew period of each lease (the kubelet's is 10 s; 1 s makes 30 rounds)
LEASES_PER_RP = 25  # 50 leases through the proxy, spread over rp1 and rp2
# Upper bound of one run: the renewals, the informer's sync (60 s at most) and catch-up (10 s).
LEASE_RUN_TIMEOUT = LEASE_RUN_SECONDS + 120
POD_RUN_TIMEOUT = 180  # 15 requests, 20 s at most each
NATIVE_LIMIT = 2**64  # native RVs (etcd revisions) are below it; proxy RVs of merged resources are not

Report = dict[str, Any]


def _valid_rv(rv: str) -> bool:
    """KEP-5504 / HaveValidResourceVersion: positive decimal, no leading zeros, at most 128 bits."""
    return rv.isascii() and rv.isdigit() and rv[0] != "0" and int(rv) < 2**128


# --- leases --------------------------------------------------------------------------------


def _lease(name: str, renew_time: datetime) -> dict[str, Any]:
    """A node Lease as a kubelet creates it, held by the node itself."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": renew_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }


@pytest.fixture
def node_leases(kube: Kube) -> Iterator[dict[str, list[str]]]:
    """Creates node Leases straight in their RPs, renewed an hour ago, and deletes them after the
    test: `node_leases` maps a partition to the names to create there (filled by the test)."""
    created: dict[str, list[str]] = {}

    yield created

    for partition, names in created.items():
        kube.kubectl("-n", LEASE_NAMESPACE, "delete", "lease", *names, "--ignore-not-found", "--wait=false",
                     kubeconfig=kube.direct(partition), check=False)


def _create_leases(kube: Kube, created: dict[str, list[str]], partition: str, names: list[str]) -> None:
    past = datetime.now(UTC) - timedelta(hours=1)
    created.setdefault(partition, []).extend(names)
    kube.create({"apiVersion": "v1", "kind": "List", "items": [_lease(n, past) for n in names]},
                kubeconfig=kube.direct(partition))


def _renew_times(kube: Kube, partition: str) -> dict[str, datetime]:
    """spec.renewTime of every Lease in kube-node-lease, read straight from `partition`."""
    out = kube.kubectl("-n", LEASE_NAMESPACE, "get", "leases", "-o", "json", kubeconfig=kube.direct(partition))
    times = {}
    for item in json.loads(out)["items"]:
        renew = item.get("spec", {}).get("renewTime")
        if renew:
            times[item["metadata"]["name"]] = datetime.fromisoformat(renew)
    return times


def _lease_summary(label: str, report: Report) -> str:
    per_lease = report["leases"].values()
    renewed = sum(1 for lr in per_lease if lr["renewals_ok"] > 0)
    return (
        f"{label} [{report['server']}, {report['content_type']}]: {report['renewals_ok']}/{report['renewals_attempted']} "
        f"renewals ok, {renewed}/{len(report['leases'])} leases renewed, {report['errors_total']} errors, "
        f"{report['informer_events']['total']} informer events ({report['informer_events']}), "
        f"informer synced in {report['informer_sync_seconds']:.2f} s, RVs valid: {report['all_rvs_valid']} "
        f"({report['rvs_seen_count']} seen), informer RVs increasing: {report['informer_rvs_increasing']}, "
        f"informer caught up: {report['informer_caught_up']}"
    )


def _lease_problems(
    report: Report, names: list[str], renew_times: dict[str, datetime], started: datetime, *, through_proxy: bool
) -> list[str]:
    """Everything wrong with one `leases` run, each with the figures to debug it."""
    problems = []
    if report["errors_total"]:
        problems.append(f"{report['errors_total']} errors, first ones: {json.dumps(report['errors'][:5])}")
    if report["renewals_attempted"] == 0 or report["renewals_ok"] != report["renewals_attempted"]:
        problems.append(f"renewals ok {report['renewals_ok']} of {report['renewals_attempted']} attempted")
    if not report["all_rvs_valid"]:
        problems.append(f"{report['rvs_invalid_total']} invalid RVs, e.g. {report['rvs_invalid'][:5]}")
    not_renewed = [n for n in names if report["leases"][n]["renewals_ok"] == 0]
    if not_renewed:
        problems.append(f"{len(not_renewed)} leases never renewed, e.g. {not_renewed[:5]}")
    regressions = {n: lr["informer_rv_regressions"][:3] for n, lr in report["leases"].items() if not lr["informer_rvs_increasing"]}
    if regressions:
        problems.append(f"informer RVs not strictly increasing for {len(regressions)} leases, e.g. {dict(list(regressions.items())[:3])}")
    lagging = {
        n: {"informer": (lr["informer_last_renew_time"], lr["informer_last_rv"]), "renewed": (lr["last_renew_time"], lr["last_renewed_rv"])}
        for n, lr in report["leases"].items()
        if not lr["informer_caught_up"]
    }
    if lagging:
        problems.append(f"the informer never delivered the last renewal of {len(lagging)} leases (renewTime, RV): "
                        f"{dict(list(lagging.items())[:3])}")
    stale = {n: str(renew_times.get(n)) for n in names if not (renew_times.get(n) and renew_times[n] > started)}
    if stale:
        problems.append(f"renewTime read straight from the lease's RP not after the run's start {started}: "
                        f"{len(stale)} leases, e.g. {dict(list(stale.items())[:3])}")
    if through_proxy:
        native = {n: lr["last_rv"] for n, lr in report["leases"].items() if lr["last_rv"] and _valid_rv(lr["last_rv"])
                  and int(lr["last_rv"]) < NATIVE_LIMIT}
        if native:
            problems.append(f"native RVs through the proxy for {len(native)} leases, e.g. {dict(list(native.items())[:3])}")
    return problems


def _check_lease_renewals(binary: Path, kube: Kube, unique: str, created: dict[str, list[str]], content_type: str) -> None:
    """50 node Leases over rp1 and rp2 renewed through the proxy, and 25 more in rp1 renewed
    straight against rp1 at the same time (the reference: other leases, so the two runs never
    race for one object)."""
    tag = f"cg{content_type[0]}{unique}"
    proxied = {rp: [f"{rp}-{tag}-{i:02d}" for i in range(LEASES_PER_RP)] for rp in ("rp1", "rp2")}
    reference = [f"rp1-ref{tag}-{i:02d}" for i in range(LEASES_PER_RP)]
    _create_leases(kube, created, "rp1", proxied["rp1"] + reference)
    _create_leases(kube, created, "rp2", proxied["rp2"])
    names = proxied["rp1"] + proxied["rp2"]
    timing = ["--duration", f"{LEASE_RUN_SECONDS}s", "--interval", f"{LEASE_INTERVAL_SECONDS}s", "--content-type", content_type]

    started = datetime.now(UTC)
    through = start_rvcheck(binary, ["leases", "--kubeconfig", str(kube.admin), "--names", ",".join(names), *timing])
    direct = start_rvcheck(binary, ["leases", "--kubeconfig", str(kube.direct("rp1")), "--names", ",".join(reference), *timing])
    try:
        proxy_report = finish_rvcheck(through, "leases through the proxy", timeout=LEASE_RUN_TIMEOUT)
        direct_report = finish_rvcheck(direct, "leases straight to rp1", timeout=LEASE_RUN_TIMEOUT)
    finally:
        reap_rvcheck(through)
        reap_rvcheck(direct)

    renew_times = _renew_times(kube, "rp1") | _renew_times(kube, "rp2")
    both = f"{_lease_summary('through the proxy', proxy_report)}\n{_lease_summary('straight to rp1', direct_report)}"
    direct_problems = _lease_problems(direct_report, reference, renew_times, started, through_proxy=False)
    assert not direct_problems, "the reference run straight against rp1 failed:\n" + "\n".join(direct_problems) + "\n" + both
    proxy_problems = _lease_problems(proxy_report, names, renew_times, started, through_proxy=True)
    assert not proxy_problems, "client-go lease renewals through the proxy:\n" + "\n".join(proxy_problems) + "\n" + both


def test_client_go_renews_node_leases_through_the_proxy_with_protobuf(
    rvcheck: Path, kube: Kube, unique: str, node_leases: dict[str, list[str]]
) -> None:
    _check_lease_renewals(rvcheck, kube, unique, node_leases, "protobuf")


def test_client_go_renews_node_leases_through_the_proxy_with_json(
    rvcheck: Path, kube: Kube, unique: str, node_leases: dict[str, list[str]]
) -> None:
    _check_lease_renewals(rvcheck, kube, unique, node_leases, "json")


# --- pods ----------------------------------------------------------------------------------


def _steps_table(proxy: Report, direct: Report) -> str:
    """Both runs step by step: outcome, code, reason, RVs, and the message when they differ."""
    rows = [f"{'step':22} {'through the proxy':40} | straight to the partition"]
    by_step = {s["step"]: s for s in direct["steps"]}
    for s in proxy["steps"]:
        d = by_step.get(s["step"], {"ok": None, "code": None, "reason": None, "rv_before": "", "rv_after": "", "message": ""})
        rows.append(f"{s['step']:22} {str(s['ok']):5} {s['code']!s:4} {s['reason'] or '-':18} | "
                    f"{str(d['ok']):5} {d['code']!s:4} {d['reason'] or '-'} (expected {s['expected']})")
        rows.append(f"{'':22}   rv {s['rv_before'] or '-'} -> {s['rv_after'] or '-'}  | rv {d['rv_before'] or '-'} -> {d['rv_after'] or '-'}")
        if not s["ok"]:
            rows.append(f"{'':22}   proxy: {s['message'][:400]}{'  [' + s['note'] + ']' if s.get('note') else ''}")
    return "\n".join(rows)


@pytest.mark.parametrize("content_type", ["protobuf", "json"])
@pytest.mark.parametrize(("tenant", "partition"), [("acme", "tp1"), ("zoo", "tp2")])
def test_client_go_pod_round_trips_through_the_proxy(
    rvcheck: Path, kube: Kube, unique: str, content_type: str, tenant: str, partition: str
) -> None:
    """Every write verb and patch type with resourceVersion preconditions (current, then stale),
    and DELETE with preconditions: through the proxy each step answers as the owning TP does."""
    namespace = f"{tenant}{unique}-cg"
    node_name = f"rp1-cg-{unique}"
    kube.kubectl("create", "namespace", namespace, kubeconfig=kube.direct(partition))
    try:
        common = ["pods", "--namespace", namespace, "--node", node_name, "--content-type", content_type]
        direct = run_rvcheck(rvcheck, [*common, "--kubeconfig", str(kube.direct(partition)), "--name", "cg-direct"],
                      f"pods straight to {partition}", timeout=POD_RUN_TIMEOUT)
        proxy = run_rvcheck(rvcheck, [*common, "--kubeconfig", str(kube.admin), "--name", "cg-proxy"],
                     "pods through the proxy", timeout=POD_RUN_TIMEOUT)
    finally:
        kube.kubectl("delete", "namespace", namespace, "--wait=false", kubeconfig=kube.direct(partition), check=False)

    table = _steps_table(proxy, direct)
    assert direct["all_ok"], f"the reference run straight against {partition} did not answer as expected:\n{table}"
    problems = []
    outcome = {s["step"]: (s["ok"], s["code"], s["reason"]) for s in direct["steps"]}
    differing = [s["step"] for s in proxy["steps"] if outcome.get(s["step"]) != (s["ok"], s["code"], s["reason"])]
    if differing or len(proxy["steps"]) != len(direct["steps"]):
        problems.append(f"steps answered differently from {partition}: {differing}")
    server_errors = [f"{s['step']}: {s['code']} {s['message'][:200]}" for s in proxy["steps"] if s["code"] >= 500]
    if server_errors:
        problems.append(f"5xx through the proxy: {server_errors}")
    if not proxy["all_rvs_valid"]:
        problems.append(f"invalid RVs through the proxy: {proxy['rvs_invalid']}")
    native = [rv for rv in proxy["rvs_seen"] if _valid_rv(rv) and int(rv) < NATIVE_LIMIT]
    if native:
        problems.append(f"native RVs through the proxy: {native}")
    assert not problems, (
        f"client-go ({content_type}) pod round trip in {namespace} through the proxy:\n" + "\n".join(problems) + "\n" + table
    )
