"""All I/O of partition-proxy: the CLI, the aiohttp application, identity, forwarding, union
list/watch, upstream sessions, health and metrics. Decisions are made in `routing`."""
