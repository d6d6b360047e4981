"""The config the chart renders into its ConfigMap is a config the proxy accepts
(`partition-proxy serve --check-config`) and runs: rendered with mount paths pointing at files
laid out as the Secrets would be mounted, a proxy started from it serves the test federation."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.federation import PROXY_ADMINS_GROUP, _free_ports
from hack.proxy_process import tenant_ranges
from tests.chart.conftest import REPO, Helm, rendered_config
from tests.federation import Kube, node, require

EXE = Path(sys.executable).parent / "partition-proxy"


def check_config(path: Path, *, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, str(EXE), "serve", "--config", str(path), "--check-config"], capture_output=True, text=True, timeout=30)


def write_config(helm: Helm, path: Path, values: dict[str, Any] | None = None) -> dict[str, Any]:
    config = rendered_config(helm.template(values=values, show_only="templates/configmap.yaml"))
    path.write_text(yaml.safe_dump(config))
    return config


def test_default_rendered_config_passes_check_config(helm: Helm, tmp_path: Path) -> None:
    # The Secrets are not mounted here: --check-config judges the config, not the files.
    config = write_config(helm, tmp_path / "config.yaml")
    assert config["partitions"][0]["kubeconfig"] == "/etc/partition-proxy/partitions/tp1/kubeconfig"
    done = check_config(tmp_path / "config.yaml")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "config OK\n" and done.stderr == ""


def test_check_config_fails_with_one_line_naming_the_field_the_schema_cannot_judge(helm: Helm, tmp_path: Path) -> None:
    values = {"proxy": {"caches": [{"name": "pods", "resource": "pods", "role": "tenant", "labelSelector": "tier in (a"}]}}
    write_config(helm, tmp_path / "config.yaml", values)
    done = check_config(tmp_path / "config.yaml")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("partition-proxy: config error: caches.0.label_selector:")


def test_check_config_opens_no_connection(helm: Helm, tmp_path: Path) -> None:
    """Run in a network namespace without any interface up: any connection attempt would fail."""
    unshare = subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0
    require(unshare, "unshare --net not permitted here (needs CAP_SYS_ADMIN or user namespaces)")
    write_config(helm, tmp_path / "config.yaml")
    done = check_config(tmp_path / "config.yaml", prefix=("unshare", "--net"))
    assert done.returncode == 0 and done.stdout == "config OK\n", done.stderr


def mount_secrets(kube: Kube, root: Path) -> dict[str, Any]:
    """Lay out files as the chart's Secret mounts would be (a kubeconfig referring to its
    certificate files by relative path, as a Secret of several keys allows) and return the
    values that describe the test federation with mountPaths at them."""
    partitions = []
    for p in kube.fed.partitions:
        directory = root / "partitions" / p.name
        directory.mkdir(parents=True)
        crt, key = p.proxy_cert
        shutil.copy(kube.fed.ca_file, directory / "ca.crt")
        shutil.copy(crt, directory / "client.crt")
        shutil.copy(key, directory / "client.key")
        kubeconfig = yaml.safe_load(p.proxy_kubeconfig.read_text())
        kubeconfig["clusters"][0]["cluster"]["certificate-authority"] = "ca.crt"
        kubeconfig["users"][0]["user"].update({"client-certificate": "client.crt", "client-key": "client.key"})
        (directory / "proxy-kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        partitions.append({"name": p.name, "role": p.role, "existingSecret": f"pp-{p.name}", "kubeconfigKey": "proxy-kubeconfig"})
    tls = root / "tls"
    crt, key = kube.fed.ca.issue_serving(tls, "serving", ["127.0.0.1", "localhost"])
    crt.rename(tls / "tls.crt")
    key.rename(tls / "tls.key")
    shutil.copy(kube.fed.ca_file, tls / "ca.crt")
    tps = [p.name for p in kube.fed.partitions if p.role == "tenant"]
    rps = [p.name for p in kube.fed.partitions if p.role == "resource"]
    return {
        "proxy": {
            "listenAddress": "127.0.0.1",
            "port": _free_ports(1)[0],
            "partitions": partitions,
            "systemPartition": tps[0],
            "tenants": {"ranges": tenant_ranges(tps), "defaultPartition": tps[0]},
            "nodes": {"placement": "prefix", "prefixes": [{"prefix": f"{rp}-", "partition": rp} for rp in rps]},
            "mountPaths": {"tls": str(tls), "partitions": str(root / "partitions")},
        }
    }


@contextlib.contextmanager
def running_proxy(config: Path, *, port: int, ca_file: Path, log: Path, timeout: float = 30) -> Iterator[str]:
    """`partition-proxy serve --config` until its /readyz answers 200; stopped with SIGTERM."""
    with log.open("ab") as out:
        proc = subprocess.Popen([str(EXE), "serve", "--config", str(config)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    try:
        deadline = time.monotonic() + timeout
        ctx = ssl.create_default_context(cafile=str(ca_file))
        while True:
            assert proc.poll() is None, f"proxy exited with {proc.returncode}: {log.read_text()[-2000:]}"
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
            try:
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            finally:
                conn.close()
            assert time.monotonic() < deadline, f"proxy not ready in {timeout} s: {log.read_text()[-2000:]}"
            time.sleep(0.2)
        yield f"https://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.integration
def test_proxy_started_from_the_rendered_config_serves_the_test_federation(helm: Helm, kube: Kube, unique: str, tmp_path: Path) -> None:
    values = mount_secrets(kube, tmp_path / "mounts")
    config_path = tmp_path / "config.yaml"
    config = write_config(helm, config_path, values)
    assert config["partitions"][0]["kubeconfig"] == str(tmp_path / "mounts" / "partitions" / "tp1" / "proxy-kubeconfig")
    done = check_config(config_path)
    assert done.returncode == 0 and done.stdout == "config OK\n", done.stderr

    names = {rp: f"{rp}-chart{unique}" for rp in ("rp1", "rp2")}
    for rp, name in names.items():
        kube.create(node(name), kubeconfig=kube.direct(rp))
    port = values["proxy"]["port"]
    with running_proxy(config_path, port=port, ca_file=kube.fed.ca_file, log=tmp_path / "proxy.log") as server:
        admin = kube.fed.issue_client_kubeconfig(f"chart-admin-{unique}", user="admin", groups=[PROXY_ADMINS_GROUP], server=server)
        nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json", kubeconfig=admin))
        listed = {n["metadata"]["name"] for n in nodes["items"]}
        assert set(names.values()) <= listed
        # A tenant's namespace goes to its TP through this proxy too (n-z: tp2).
        kube.kubectl("create", "namespace", f"nova{unique}-chart", kubeconfig=admin)
        assert kube.kubectl("get", "namespace", f"nova{unique}-chart", "-o", "name", kubeconfig=kube.direct("tp2")).strip()
