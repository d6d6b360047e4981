"""Every local proxy runs on the OpenSSL of the image (hack/build-openssl.sh, hack/openssl.py),
not on this machine's: the session proxy's process has .local/openssl's libssl mapped and says
so at start-up."""

from __future__ import annotations

from pathlib import Path

from hack.openssl import OPENSSL_LIB, OPENSSL_SERIES
from tests.federation import Kube


def test_the_session_proxy_runs_on_the_built_openssl(kube: Kube) -> None:
    popen = kube.proxy.popen
    assert popen is not None and popen.poll() is None
    maps = Path(f"/proc/{popen.pid}/maps").read_text()
    libssl = {line.split()[-1] for line in maps.splitlines() if "libssl.so" in line}
    assert libssl == {str((OPENSSL_LIB / "libssl.so.3").resolve())}, libssl
    assert f"TLS by {OPENSSL_SERIES}" in kube.proxy.log_path.read_text()
