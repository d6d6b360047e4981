"""Watch caches: `reflector` lists and watches one partition into a `watch_cache`,
which keeps objects as bytes and fans events out to `cache_watcher`s; `serve` answers lists
and watches from it when the request's selectors and resourceVersion allow."""
