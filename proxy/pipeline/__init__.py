"""The request pipeline: `chain` assembles the `steps` and ends in `dispatch` (cache, forward or
union). It speaks the proxy's own `proxy.messages` types, never a front end's."""
