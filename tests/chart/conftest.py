"""Fixtures of the chart tests: the real helm (.local/bin/helm, built by `make test`) and the
session federation of real kube-apiservers from tests/integration.

Without helm, these tests fail when REQUIRE_REAL_PARTITIONS=1 (CI) and are skipped otherwise.
Every helm call passes --kube-version: a go-installed helm defaults to Kubernetes 1.20.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.federation import require


REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "partition-proxy"
HELM = REPO / ".local" / "bin" / "helm"
# The newest Kubernetes minor the tests render for; the test partitions run 1.36.
KUBE_VERSION = "1.36.0"
RELEASE = "pp"


@dataclass(frozen=True)
class Helm:
    """The real helm binary, run against the chart with values given as dicts."""

    path: Path
    workdir: Path

    def _values_args(self, values: Mapping[str, Any] | None) -> list[str]:
        if not values:
            return []
        digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]
        path = self.workdir / f"values-{digest}.json"
        # JSON, not PyYAML: PyYAML writes the string "n" bare, which helm's YAML 1.1 reads as false.
        path.write_text(json.dumps(values))
        return ["-f", str(path)]

    def run(self, *args: str, values: Mapping[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.path), *args, *self._values_args(values)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    def lint(self, *, kube_version: str, values: Mapping[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run("lint", "--strict", "--kube-version", kube_version, str(CHART), values=values)

    def template_text(
        self,
        *,
        kube_version: str = KUBE_VERSION,
        values: Mapping[str, Any] | None = None,
        api_versions: Sequence[str] = (),
        namespace: str = "proxy",
        show_only: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        args = ["template", RELEASE, str(CHART), "--kube-version", kube_version, "--namespace", namespace]
        for api in api_versions:
            args += ["--api-versions", api]
        if show_only:
            args += ["--show-only", show_only]
        done = self.run(*args, values=values)
        if check and done.returncode != 0:
            raise AssertionError(f"helm template failed: {done.stderr}")
        return done

    def template(self, **kwargs: Any) -> list[dict[str, Any]]:
        """The rendered manifests as a list of objects (empty documents dropped)."""
        text = self.template_text(**kwargs).stdout
        return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    require(HELM.exists(), f"helm missing at {HELM}: run `make test` (hack/build-components.sh installs it)")
    return Helm(HELM, tmp_path_factory.mktemp("helm"))


def by_kind(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Rendered objects by kind (the chart renders at most one object of each kind)."""
    out: dict[str, dict[str, Any]] = {}
    for doc in manifests:
        assert doc["kind"] not in out, f"two objects of kind {doc['kind']}"
        out[doc["kind"]] = doc
    return out


def rendered_config(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """The proxy config held by the rendered ConfigMap."""
    config: dict[str, Any] = yaml.safe_load(by_kind(manifests)["ConfigMap"]["data"]["config.yaml"])
    return config
