"""Loading a proxy configuration file into a validated `ProxyConfig`.

Errors: every problem (missing file, bad YAML, a field that does not validate) raises
`ConfigError` whose message is ONE line naming the field, e.g.
`partitions.1.role: Input should be 'tenant' or 'resource'`. The CLI prints it and exits 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from config.models import ProxyConfig


class ConfigError(ValueError):
    """The configuration is unusable; `str(err)` is one line naming the offending field."""


def _one_line(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) if str(p).isprintable() else repr(str(p)) for p in err["loc"])
    message = str(err["msg"]).removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    suffix = f" (and {more} more)" if more else ""
    return f"{where}: {message}{suffix}" if where else f"{message}{suffix}"


def parse_config(data: Any) -> ProxyConfig:
    """Validate an already-parsed document (a dict). Raises ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError("config: the document must be a mapping")
    try:
        return ProxyConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None


def load_config(path: Path) -> ProxyConfig:
    """Read and validate a YAML configuration file. Raises ConfigError.

    Relative kubeconfig paths are resolved against the file's own directory.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config: not valid YAML{where}") from None
    if isinstance(data, dict):
        for p in data.get("partitions") or ():
            if isinstance(p, dict) and isinstance(p.get("kubeconfig"), str):
                kc = Path(p["kubeconfig"])
                p["kubeconfig"] = str(kc if kc.is_absolute() else path.parent / kc)
    return parse_config(data)
