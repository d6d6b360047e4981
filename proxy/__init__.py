"""All I/O of partition-proxy; decisions are made in `routing` (see docs/architecture.md).

- `fronts`: the listeners (HTTP/1.1 by aiohttp) that turn connections into `messages.Request`s;
- `pipeline`: the request pipeline, a chain of steps assembled in one place, ending in
  `forward` (one partition), `union_list` / `union_watch` (several), or `cache` (a watch cache);
- `clients`: the upstream client layer, the only code that talks to partitions;
- `app` assembles everything and owns the background tasks; `cli` is the command line.
"""
