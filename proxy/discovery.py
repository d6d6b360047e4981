"""Learning from discovery which resources are namespaced (routing needs it to tell a
cluster-wide list of a namespaced resource, a union over tenant partitions, from a list of a
cluster-scoped system resource).

The set is the union over every live tenant partition, read at start-up and again every
DISCOVERY_REFRESH_SECONDS, and at once after a CRD is written through the proxy
(`ProxyApp._follow_discovery`), so a custom resource made at runtime is routed as namespaced
(`kubectl get widgets -A` is a union) without a restart.

Discovery documents themselves: `/api`, `/version` and the like are the system partition's
(every partition runs the same kube-apiserver build); `/apis`, the OpenAPI v3 index and OpenAPI
v2 are merged over the TPs, and per group-version documents come from a TP that serves them
(proxy.handlers.discovery_merge), so a CRD made straight in one TP is discovered through the proxy too.
"""

from __future__ import annotations

from proxy.clients.partition import PartitionClient

# seconds between two reads of every tenant partition's discovery: how long a CRD made straight
# in a partition waits to be routed as namespaced. One read is two small GETs per TP; 30 s is
# kube-controller-manager's own discovery resync for its garbage collector and quota controller.
DISCOVERY_REFRESH_SECONDS = 30.0

# Aggregated discovery (KEP-3352, GA in 1.30): every group, version and resource in one answer.
AGGREGATED_ACCEPT = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


async def namespaced_resources(client: PartitionClient) -> frozenset[tuple[str, str]]:
    """(group, resource) of every namespaced resource the partition serves. Raises UpstreamError
    when the partition cannot be read, ValueError when its answer is not aggregated discovery."""
    found: set[tuple[str, str]] = set()
    for path in ("/api", "/apis"):
        doc = await client.get_json(path, headers={"Accept": AGGREGATED_ACCEPT})
        if not isinstance(doc, dict) or doc.get("kind") != "APIGroupDiscoveryList":
            raise ValueError(f"{client.name}{path}: not an aggregated discovery document")
        for group in doc.get("items") or ():
            name = (group.get("metadata") or {}).get("name", "")
            for version in group.get("versions") or ():
                for res in version.get("resources") or ():
                    if res.get("scope") == "Namespaced":
                        found.add((name, res["resource"]))
    return frozenset(found)
