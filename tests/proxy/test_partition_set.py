"""Following the config file (proxy.partition_set) with a stand-in for ProxyApp.reconfigure:
a change is applied once, a refused one is retried at the next poll (a credential may land
after the config) and logged once, an unchanged file does nothing."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import yaml

from config import ConfigError, load_config
from config.changes import RuntimeChange
from proxy import partition_set
from proxy.metrics import Metrics
from proxy.partition_set import PartitionSet

DOC = {
    "partitions": [{"name": "tp1", "role": "tenant", "kubeconfig": "/k/tp1"}, {"name": "rp1", "role": "resource", "kubeconfig": "/k/rp1"}],
    "system_partition": "tp1",
}


async def test_a_refused_change_is_retried_at_each_poll_and_logged_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(partition_set, "CONFIG_POLL_SECONDS", 0.02)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(DOC))
    applied: list[RuntimeChange] = []
    credential_ready = False

    async def apply(change: RuntimeChange) -> None:
        if not credential_ready:
            raise ConfigError("partition set: [Errno 2] No such file or directory: '/k/rp2'")
        applied.append(change)

    follower = PartitionSet(load_config(path), path, Metrics.create(), apply)
    version = follower.version
    task = asyncio.create_task(follower.run())
    try:
        await asyncio.sleep(0.1)
        assert follower.version == version and not applied  # unchanged file: nothing
        doc = {**DOC, "partitions": [*DOC["partitions"], {"name": "rp2", "role": "resource", "kubeconfig": "/k/rp2"}]}
        path.write_text(yaml.safe_dump(doc))
        with caplog.at_level(logging.ERROR, logger="partition_proxy.partition_set"):
            await asyncio.sleep(0.3)
        assert follower.last_error.endswith("'/k/rp2'") and follower.version == version
        assert len([r for r in caplog.records if "refused" in r.message]) == 1
        credential_ready = True
        await asyncio.sleep(0.2)
        assert [c.joined for c in applied] == [("rp2",)]
        assert follower.version != version and follower.last_error == ""
        assert follower.debug()["partitions"][-1] == {"name": "rp2", "role": "resource", "state": "active"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
