"""Configuration of partition-proxy: pydantic models, loading and validation.

This package is the lowest layer: it imports neither aiohttp nor anything from `routing` or
`proxy`. A configuration that does not validate fails start-up with one line naming the field
(`ConfigError`).
"""

from config.load import ConfigError, load_config, parse_config
from config.models import (
    ListenConfig,
    NodePlacement,
    PartitionConfig,
    PartitionRole,
    PartitionState,
    ProxyConfig,
    TenantRange,
    TenantRules,
)

__all__ = [
    "ConfigError",
    "ListenConfig",
    "NodePlacement",
    "PartitionConfig",
    "PartitionRole",
    "PartitionState",
    "ProxyConfig",
    "TenantRange",
    "TenantRules",
    "load_config",
    "parse_config",
]
