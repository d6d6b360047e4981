"""Pure routing logic of partition-proxy: no I/O, no aiohttp.

- `requestinfo`: RequestInfo parsing of Kubernetes API paths, partition prefixes, tenant paths;
- `placement`: tenant -> tenant partition and node -> resource partition rules;
- `decide`: the route of a request (forward, fan-out, reject);
- `rv`: proxy resourceVersion numbers: object and vector forms, epochs (KEP-5504 ordering);
- `translate`: where resourceVersions cross the proxy, per media type, both directions;
- `rvjson`, `protobuf`: the JSON/YAML and Kubernetes protobuf codecs `translate` uses;
- `merge`: union list merging and the union watch state machine;
- `cache_policy`, `selectors`, `status`: serving from caches, selectors, Status objects.
"""
