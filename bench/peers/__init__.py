"""Peers of the proxy's routed-request path, written only to be measured beside it
(`bench/routed_requests.py`): the simplest Python programs doing the same work, so the proxy's
own cost shows as a ratio in the same run. They are kept plain and never tuned against the
proxy's figures.

- `aiohttp_forwarder`: aiohttp's server, aiohttp's ClientSession to the owning partition.
- `lean_forwarder`: aiohttp's server, persistent uvloop TLS connections to the owning partition,
  each request in one write, the answer parsed by httptools (llhttp): the floor.

Both: TLS in with a client certificate required (its CN and O become the impersonated user and
groups, as the proxy's), route a request to the resource partition when its path names node
Leases and to the tenant partition otherwise, send the proxy's impersonation headers (so the
partition checks RBAC for the same user on both sides), and pass the answer back as it came.
Nothing else: no Status errors, no metrics, no resourceVersion translation.

Run: `python -m bench.peers.lean_forwarder --port P --cert C --key K --client-ca CA
--upstream tp=https://127.0.0.1:6443 --upstream rp=https://... --upstream-ca CA
--upstream-cert C --upstream-key K`; `--processes` is the number of such processes sharing the
port (SO_REUSEPORT), started by the caller.
"""
