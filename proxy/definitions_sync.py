"""Replicated definitions (routing.decide.REPLICATED) kept present in every tenant partition
(every partition for REPLICATED_EVERYWHERE: FlowSchemas and PriorityLevelConfigurations).

Writes through the proxy reach every live TP at once (proxy.handlers.replicate). What that misses: a TP
that joins the partition set later, and a TP that did not answer when the write was made. This
loop creates, in every live TP other than the system partition, each replicated definition the
system partition has and the TP lacks: at once when a TP joins (`wake`), and every
DEFINITIONS_SYNC_SECONDS. It only creates what is missing, with the proxy's own credential (which
needs get, list and create on these kinds in every TP: hack/federation.py RBAC_YAML); it never
updates or deletes a definition that differs (an operator's change in one TP is not overwritten;
a delete a TP missed stays missed), and counts what it could not create in
`partition_proxy_replication_failures_total`. Copies that differ from the system partition's
(routing.replicas: the definition, or the status of its conditions) are counted in
`partition_proxy_definitions_differing{partition, resource}` and named in a log line each pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from proxy.clients.errors import APIConflict, APINotFound, UpstreamError
from proxy.context import ProxyContext
from routing.decide import REPLICATED_VERSIONS, replica_partitions
from routing.replicas import copy_differences

log = logging.getLogger("partition_proxy.definitions_sync")

# seconds between two full syncs: a TP that missed a write gets it within this long; one sync is
# a list per kind per TP (a few requests), so 5 minutes costs nothing and bounds the gap.
DEFINITIONS_SYNC_SECONDS = 300.0
# The path of each replicated kind's collection, in REPLICATED_VERSIONS' order.
KIND_PATHS = tuple(((group, resource), resource, f"/apis/{group}/{version}/{resource}")
                   for (group, resource), version in REPLICATED_VERSIONS.items())
# copies named per kind and partition in one pass's log (the gauge counts them all)
_LOGGED_DIFFERENCES = 5
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink", "deletionTimestamp")


def creatable(obj: dict[str, Any], kind: str, api_version: str) -> dict[str, Any]:
    """A listed object as a create body: kind and apiVersion set, what the server sets dropped
    (metadata it fills in, status)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _SERVER_SET}
    out = {k: v for k, v in obj.items() if k not in ("status", "metadata")}
    return {**out, "apiVersion": api_version, "kind": kind, "metadata": meta}


async def sync_definitions(ctx: ProxyContext) -> int:
    """One pass (module docstring): the definitions created."""
    placement = ctx.routing.placement
    system = ctx.clients.get(placement.system_partition)
    if system is None or not placement.all_partitions:
        return 0
    created = 0
    for key, resource, path in KIND_PATHS:
        targets = [p for p in replica_partitions(placement, key) if p in ctx.clients]
        if not targets:
            continue
        try:
            source = await system.get_json(path)
        except (APINotFound, UpstreamError, ValueError):
            continue  # not served here (or the system partition is away): next pass
        kind = str(source.get("kind", "")).removesuffix("List")
        api_version = str(source.get("apiVersion", ""))
        wanted = {(i.get("metadata") or {}).get("name"): i for i in source.get("items") or ()}
        for partition in targets:
            client = ctx.clients[partition]
            try:
                have = {(i.get("metadata") or {}).get("name"): i for i in (await client.get_json(path)).get("items") or ()}
            except (UpstreamError, ValueError):
                continue
            differing = {name: found for name, obj in wanted.items() if name in have and (found := copy_differences(obj, have[name]))}
            ctx.metrics.definitions_differing.labels(partition, resource).set(len(differing))
            for name, found in sorted(differing.items())[:_LOGGED_DIFFERENCES]:
                log.warning("definitions: %s %s in %s differs from the system partition's: %s", resource, name, partition, "; ".join(found))
            for name, obj in wanted.items():
                if name in have:
                    continue
                try:
                    await client.send_json("POST", path, creatable(obj, kind, api_version))
                    created += 1
                except APIConflict:
                    pass  # made meanwhile
                except (UpstreamError, ValueError) as exc:
                    ctx.metrics.replication_failures.labels(partition, resource).inc()
                    log.warning("definitions: %s %s not created in %s: %s", resource, name, partition, exc)
    if created:
        log.info("definitions: created %d missing", created)
    return created


async def follow_definitions(ctx: ProxyContext, wake: asyncio.Event) -> None:
    """Sync every DEFINITIONS_SYNC_SECONDS, and at once when `wake` is set (a TP joined)."""
    while True:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(wake.wait(), DEFINITIONS_SYNC_SECONDS)
        wake.clear()
        await sync_definitions(ctx)
