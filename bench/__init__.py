"""Benchmarks of partition-proxy against a peer in the same run (see bench/README.md)."""
