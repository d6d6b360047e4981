"""The Go unit tests of the client-go programs (`hack/k8s/clients/rvcheck/*_test.go`: the pure
logic of the fleet's kubelets, such as which failures its Lease renewals count), run with the
Go and the flags that build them (`hack/build-components.sh`). A missing Go fails, as building
the programs would."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

MODULE = Path(__file__).resolve().parents[2] / "hack" / "k8s"
# seconds: compiling the package's test binary (client-go comes from Go's build cache that
# `make components` filled with the same -trimpath; about 20 s on the 2-core machine, minutes cold)
GO_TEST_TIMEOUT = 900.0


def test_the_rvcheck_go_unit_tests_pass() -> None:
    go = shutil.which("go")
    assert go, "no `go` on PATH: the client-go programs need Go 1.26 (docs: shared/reference/real-components.md)"
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    proc = subprocess.run([go, "test", "-trimpath", "-count=1", "-v", "./clients/rvcheck"], cwd=MODULE, env=env,
                          capture_output=True, text=True, timeout=GO_TEST_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "--- PASS: TestA409AfterAnUnansweredRenewalIsItsEchoNotASecondFailure" in proc.stdout
