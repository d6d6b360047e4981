"""The upstream client layer: the only code that touches aiohttp's client and the circuit
breakers (an import-linter contract in pyproject.toml). `partition.PartitionClient` reaches one
partition; `watch.WatchStream` keeps one of its watches open; `errors` are the proxy's own error
types for everything that goes wrong there."""
