"""A real toxiproxy server (built by hack/build-components.sh) between the proxy and partitions.

`ToxiproxyServer.start()` runs `toxiproxy-server` on a free loopback port and points the
toxiproxy-python client at it; `route(fed)` creates one toxiproxy proxy per partition and writes
kubeconfigs (the proxy's own credential) whose server is the toxiproxy listener, for
`ProxyProcess(kubeconfigs=...)`. Tests then cut, slow or reset a partition's link with the
client (`proxy.disable()`, `proxy.add_toxic(...)`), while their own direct kubeconfigs still
reach the partition.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.proxy import Proxy

from hack.federation import DEFAULT_BIN_DIR, Federation, _free_ports
from hack.pki import write_kubeconfig
from hack.procs import FederationError, spawn, stop_process, tail


class ToxiproxyServer:
    def __init__(self, directory: Path, *, bin_dir: Path = DEFAULT_BIN_DIR) -> None:
        self.directory = directory
        self.binary = bin_dir / "toxiproxy-server"
        self.port = _free_ports(1)[0]
        self.popen: subprocess.Popen[bytes] | None = None
        self.client = Toxiproxy()

    def start(self, timeout: float = 20.0) -> ToxiproxyServer:
        """Start the server and wait (seconds) until its API answers. Raises FederationError."""
        if not self.binary.exists():
            raise FederationError(f"{self.binary} missing: run hack/build-components.sh")
        self.directory.mkdir(parents=True, exist_ok=True)
        log_path = self.directory / "toxiproxy.log"
        self.popen = spawn([str(self.binary), "-host", "127.0.0.1", "-port", str(self.port)], log=log_path)
        APIConsumer.host, APIConsumer.port = "127.0.0.1", self.port
        deadline = time.monotonic() + timeout
        while not self.client.running():
            if self.popen.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise FederationError(f"toxiproxy server did not start:\n{tail(log_path)}")
            time.sleep(0.1)
        return self

    def route(self, fed: Federation) -> tuple[dict[str, Proxy], dict[str, Path]]:
        """One toxiproxy proxy per partition and the proxy's kubeconfigs going through them."""
        proxies: dict[str, Proxy] = {}
        kubeconfigs: dict[str, Path] = {}
        for p in fed.partitions:
            listen = _free_ports(1)[0]
            proxies[p.name] = self.client.create(
                upstream=f"127.0.0.1:{p.port}", name=p.name, listen=f"127.0.0.1:{listen}"
            )
            crt, key = p.proxy_cert
            kubeconfigs[p.name] = write_kubeconfig(
                self.directory / f"{p.name}.yaml",
                server=f"https://127.0.0.1:{listen}",
                ca_file=fed.ca_file,
                cert_file=crt,
                key_file=key,
                name=p.name,
            )
        return proxies, kubeconfigs

    def stop(self) -> None:
        proc, self.popen = self.popen, None
        stop_process(proc)
