"""Front ends: the listeners that turn client connections into the pipeline's requests. Only
these and `proxy.clients` import aiohttp."""
