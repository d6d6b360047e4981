"""Pure routing logic of partition-proxy: no I/O, no aiohttp (DESIGN §2, §4, §5).

- `requestinfo`: RequestInfo parsing of Kubernetes API paths, partition prefixes, tenant paths;
- `placement`: tenant -> tenant partition and node -> resource partition rules;
- `decide`: the route of a request (forward, fan-out, reject);
- `rv`: the proxy resourceVersion codec (RV vectors, KEP-5504 ordering);
- `rvrewrite`: byte-level resourceVersion rewriting of compact JSON;
- `merge`: union list merging and the union watch state machine;
- `protobuf`, `status`: names in protobuf bodies, Status objects.
"""
