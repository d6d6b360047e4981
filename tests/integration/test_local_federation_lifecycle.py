"""The local federation's processes live and die as a user expects (`make run`, the tests'
federation, the benches: hack/procs.py).

- `python -m hack.run` (what `make run` starts) restarts the proxy when it is SIGKILLed, as a
  Deployment restarts its pod, and the partitions and the control plane keep running;
- SIGINT stops every process it started, also when a partition's etcd died first (its
  kube-apiserver then ignores SIGTERM and must be killed);
- a launcher killed with SIGKILL takes its partitions with it, also those it started from a
  thread that had already ended (asyncio.to_thread, as tests do).
Each federation here is its own, in a temporary directory, on free ports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


from hack.federation import REPO, _free_ports, find_kubectl
from hack.procs import alive, children, descendants, spawn, stop_process
from tests.federation import eventually, require_binaries



def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _named(pids: set[int], needle: str) -> list[int]:
    return sorted(p for p in pids if needle in _cmdline(p))


def _survivors(pids: set[int]) -> dict[int, str]:
    return {p: _cmdline(p) for p in pids if alive(p)}


def test_make_run_restarts_a_killed_proxy_and_leaves_nothing_behind(tmp_path: Path) -> None:
    require_binaries("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "kwok")
    state, out = tmp_path / "state", tmp_path / "run.out"
    port = _free_ports(1)[0]
    run = spawn([sys.executable, "-m", "hack.run", "--no-demo", "--hollow-nodes", "0", "--workers", "2",
                 "--port", str(port), "--state-dir", str(state)], log=out, cwd=REPO, env={"PYTHONUNBUFFERED": "1"})
    try:
        eventually(lambda: (state / "run" / "ready").exists() or run.poll() is not None, 300, "make run ready")
        assert run.poll() is None, out.read_text()[-3000:]
        before = descendants(run.pid)
        apiservers, etcds = _named(before, "kube-apiserver"), _named(before, "/etcd ")
        plane = _named(before, "kube-scheduler") + _named(before, "kube-controller-manager") + _named(before, "kwok")
        supervisor = [p for p in _named(before, "partition-proxy serve") if children(p)]
        assert len(apiservers) == 4 and len(etcds) == 4 and plane and len(supervisor) == 1, {p: _cmdline(p) for p in before}
        workers = children(supervisor[0])
        assert len(workers) == 2

        os.kill(supervisor[0], signal.SIGKILL)  # its workers die with it (proxy.workers)
        eventually(lambda: "restarted it on" in out.read_text(), 120, "the proxy restarted")
        kubectl = [find_kubectl(), "--kubeconfig", str(state / "kubeconfigs" / "proxy.yaml")]
        got = subprocess.run([*kubectl, "get", "--raw", "/api/v1/namespaces/kube-system"], capture_output=True, text=True, timeout=60)
        assert got.returncode == 0, got.stderr
        assert not [p for p in apiservers + etcds + plane if not alive(p)], "a partition or the control plane stopped with the proxy"
        assert run.poll() is None

        # A partition's etcd dies first: its kube-apiserver no longer stops on SIGTERM.
        everything = before | descendants(run.pid)
        etcd_of_tp1 = [p for p in etcds if "/tp1/" in _cmdline(p)]
        os.kill(etcd_of_tp1[0], signal.SIGKILL)
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=120) == 0, out.read_text()[-3000:]
        eventually(lambda: not _survivors(everything), 10, "every process of the federation stopped")
    finally:
        stop_process(run, grace=60)
    assert "stopped" in out.read_text()


_LAUNCHER = """
import sys, threading, time
from pathlib import Path
from hack.federation import Federation
fed = Federation(Path(sys.argv[1]), tenant_partitions=1, resource_partitions=1)
started = threading.Thread(target=fed.start)  # a thread that ends once the partitions run
started.start(); started.join()
print("ready", flush=True)
time.sleep(600)
"""


def test_a_killed_launcher_takes_its_partitions_along(tmp_path: Path) -> None:
    require_binaries("kube-apiserver", "etcd")
    launcher = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(tmp_path / "federation")], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert launcher.stdout is not None
        line = launcher.stdout.readline()
        assert line.strip() == "ready", line + launcher.stdout.read()
        partitions = descendants(launcher.pid)
        assert len(_named(partitions, "kube-apiserver")) == 2 and len(_named(partitions, "/etcd ")) == 2
        launcher.kill()
        launcher.wait(timeout=10)
        eventually(lambda: not _survivors(partitions), 10, "the partitions died with their launcher")
    finally:
        stop_process(launcher, grace=1)
