"""Every module has its place in an import contract (pyproject.toml, import-linter, checked by
`make lint`): a module of proxy/ that no layer names could import anything and be imported by
anything, unseen. routing/ and config/ modules are held by the contracts on their packages (pure
core, layers); proxy/ modules by the proxy layers contract, by their own name or their package's."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _contracts() -> list[dict[str, object]]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _named(contract: dict[str, object]) -> set[str]:
    names: set[str] = set()
    for key in ("layers", "modules", "source_modules", "protected_modules"):
        for entry in contract.get(key, []) or []:  # type: ignore[union-attr]
            names.update(part.strip() for part in str(entry).split("|"))
    return names


def _modules(package: str) -> list[str]:
    out = []
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append(".".join(parts))
    return out


def test_every_proxy_module_has_a_layer_of_its_own_or_its_packages() -> None:
    layered = set().union(*(_named(c) for c in _contracts() if c["name"].startswith("proxy layers")))  # type: ignore[union-attr]
    unplaced = [m for m in _modules("proxy") if m != "proxy"
                and not any(m == name or m.startswith(name + ".") for name in layered)]
    assert not unplaced, f"modules of proxy/ in no layer: {unplaced}"


def test_every_routing_and_config_module_is_held_by_a_contract() -> None:
    named = set().union(*(_named(c) for c in _contracts()))
    for package in ("routing", "config"):
        assert package in named
        assert _modules(package)  # the package is there to be held
