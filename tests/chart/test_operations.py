"""What the chart ships for operations (docs/operations.md): the PrometheusRule of the proxy's
alerts, checked by the real `promtool check rules`, and the Grafana dashboard, whose queries must
name metrics the proxy exports (a renamed metric would leave a panel or an alert silently empty)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import generate_latest

from proxy.metrics import Metrics
from tests.chart.conftest import Helm
from tests.federation import DEFAULT_BIN_DIR, require_binaries

ENABLED = {"prometheusRule": {"enabled": True, "force": True}, "grafanaDashboard": {"enabled": True}}
# PromQL words that are not metric names
_PROMQL = {"sum", "min", "max", "by", "rate", "increase", "histogram_quantile", "le", "and", "or", "on", "without"}
_METRIC = re.compile(r"\b([a-z_][a-z0-9_]*)\s*(?=\{|\[)")


def _exported() -> set[str]:
    """Every sample name the proxy's /metrics can carry (families as prometheus-client writes them),
    and the partitions' APF families (proxy.flowcontrol_metrics) by their prefix."""
    metrics = Metrics.create()
    metrics.requests.started("other")
    metrics.requests.ended("other", "get", "forward", "tp1", "200", 0.01, ("GET", "", "v1", "pods", "", "resource", "apiserver"))
    for child in (metrics.degraded.labels("tp1", "stale"), metrics.watchers_behind.labels("nodes"), metrics.rejected.labels("read-only", "class"),
                  metrics.reloads.labels("applied"), metrics.replication_failures.labels("tp2", "crds")):
        child.inc()
    for gauge in (metrics.partition_available.labels("tp1"), metrics.table_age, metrics.connections.labels("h2"),
                  metrics.connections_accepted.labels("h2"), metrics.cache_objects.labels("nodes"), metrics.cache_bytes.labels("nodes"),
                  metrics.cache_watchers.labels("nodes"), metrics.cache_relists.labels("nodes", "rp1"),
                  metrics.cache_resource_version.labels("nodes", "rp1"), metrics.partition_set.labels("1"),
                  metrics.definitions_differing.labels("tp2", "crds")):
        gauge.set(1)
    metrics.gc_pause.labels("2").observe(0.01)
    metrics.loop_lag.observe(0.01)
    text = generate_latest(metrics.registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def _rule(helm: Helm) -> dict[str, Any]:
    rules = [m for m in helm.template(values=ENABLED) if m["kind"] == "PrometheusRule"]
    assert len(rules) == 1
    return rules[0]


def _names(expr: str) -> set[str]:
    return {m for m in _METRIC.findall(expr) if m not in _PROMQL}


def test_the_alerts_pass_promtool_and_name_only_exported_metrics(helm: Helm, tmp_path: Path) -> None:
    require_binaries("promtool")
    rule = _rule(helm)
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run([str(DEFAULT_BIN_DIR / "promtool"), "check", "rules", str(rules_file)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    alerts = rule["spec"]["groups"][0]["rules"]
    assert {a["alert"] for a in alerts} >= {"PartitionProxyBreakerOpen", "PartitionProxyPartitionDown", "PartitionProxyResourceVersionTableStale",
                                           "PartitionProxyWatchersFallingBehind", "PartitionProxyEventLoopLag", "PartitionProxyServerErrors"}
    exported = _exported()
    for alert in alerts:
        assert _names(alert["expr"]) and _names(alert["expr"]) <= exported, (alert["alert"], _names(alert["expr"]) - exported)
        assert "docs/operations.md#" in alert["annotations"]["description"]


def test_the_runbook_of_every_alert_is_in_the_operations_guide(helm: Helm) -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-") for line in guide.splitlines() if line.startswith("#")}
    for alert in _rule(helm)["spec"]["groups"][0]["rules"]:
        anchor = alert["annotations"]["description"].split("docs/operations.md#", 1)[1].split()[0]
        assert anchor in anchors, (alert["alert"], anchor)


def test_the_dashboard_is_a_grafana_dashboard_of_exported_metrics(helm: Helm) -> None:
    manifests = helm.template(values=ENABLED)
    maps = [m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"].endswith("-dashboard")]
    assert len(maps) == 1 and maps[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(maps[0]["data"]["partition-proxy.json"])
    assert dashboard["uid"] and dashboard["panels"]
    exported = _exported()
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = _names(target["expr"])
            assert names and names <= exported, (panel["title"], names - exported)


def test_neither_is_rendered_unless_asked(helm: Helm) -> None:
    kinds = {m["kind"] + "/" + m["metadata"]["name"] for m in helm.template()}
    assert kinds
    assert not [k for k in kinds if k.startswith("PrometheusRule/") or k.endswith("-dashboard")]
