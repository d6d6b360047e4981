"""Learning from discovery which resources are namespaced (routing needs it to tell a
cluster-wide list of a namespaced resource, a union over tenant partitions, from a list of a
cluster-scoped system resource).

Discovery documents themselves (`/api`, `/apis`, per group-version, aggregated v2 with its
Content-Type, ETag and 304, `/openapi/v2`, `/openapi/v3`) are forwarded to the system partition:
every partition runs the same kube-apiserver build, so the system partition's documents are the
federation's.
"""

from __future__ import annotations

from proxy.clients.partition import PartitionClient

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
