"""The request handlers: what answers a request once the pipeline has routed it (`proxy.pipeline.
dispatch` chooses). Each is independent of the others (an import-linter contract):

- `forward`: one partition;
- `union_list`, `union_watch`: several partitions merged (routing.merge);
- `replicate`: a cluster-scoped definition every partition needs (the system partition, then the
  others);
- `discovery_merge`: discovery and OpenAPI documents merged over the tenant partitions;
- `kubelet`: a pod's log, exec, attach and port-forward, asked of its node's kubelet;
- `endpoints`: the proxy's own `/livez`, `/readyz`, `/healthz`, `/metrics`, `/debug/*`.
"""
