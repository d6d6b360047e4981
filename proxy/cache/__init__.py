"""Watch caches. `cache_set` builds every configured cache (and its protobuf twin), starts a
`reflector` per partition that lists and watches it into a `watch_cache`: a `store` (objects,
indexes, the ring of recent events) whose events a `dispatcher` fans out to `cache_watcher`s.
`formats` reads and writes JSON or protobuf; `serve` answers lists and watches from a cache when
the request's selectors and resourceVersion allow (layers: pyproject.toml's "cache layers")."""
