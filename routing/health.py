"""The partitions' health checks as one kube-apiserver's: `/livez`, `/readyz` and `/healthz` with
`?verbose` list every check the partitions run, each `[+]` when it passes on every partition
that runs it, then the proxy's own. Pure.

kube-apiserver's verbose answer (k8s.io/apiserver/pkg/server/healthz: `handleRootHealth`) is
one line per check, `[+]<name> ok` or `[-]<name> failed: reason withheld`, then
`<endpoint> check passed` (200) or `<endpoint> check failed` (500). Clients and the conformance
spec `health handlers should contain necessary checks` read the check lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_CHECK = re.compile(r"^\[([+-])\](\S+) (.*)$")


@dataclass(frozen=True, slots=True)
class Check:
    """One named check and whether it passed; `failing` names the partitions where it failed."""

    name: str
    ok: bool
    failing: tuple[str, ...] = ()

    def line(self) -> str:
        """The check as kube-apiserver writes it."""
        return f"[+]{self.name} ok" if self.ok else f"[-]{self.name} failed: reason withheld"


def parse_checks(text: str) -> list[Check]:
    """The check lines of a verbose health answer, in order (other lines are left out)."""
    out = []
    for line in text.splitlines():
        match = _CHECK.match(line.strip())
        if match:
            out.append(Check(match.group(2), match.group(1) == "+"))
    return out


def merge_checks(answers: Mapping[str, Sequence[Check] | None]) -> list[Check]:
    """One check per name over the partitions' answers (partition -> its checks, None when it
    did not answer): in the order the first answer lists them, then any others in order. A
    check passes when it passes on every partition that runs it; a partition that did not
    answer fails a check of its own, `partition/<name>`."""
    order: list[str] = []
    failing: dict[str, list[str]] = {}
    for partition, checks in answers.items():
        for check in checks or ():
            if check.name not in failing:
                order.append(check.name)
                failing[check.name] = []
            if not check.ok:
                failing[check.name].append(partition)
    merged = [Check(name, not failing[name], tuple(failing[name])) for name in order]
    merged += [Check(f"partition/{partition}", False, (partition,)) for partition, checks in answers.items() if checks is None]
    return merged


def verbose_answer(endpoint: str, checks: Sequence[Check], notes: Sequence[str] = ()) -> tuple[int, str]:
    """(status, body) of a verbose health answer: 200 when every check passes, else 500.
    `notes`: lines for people after the checks (indented: no client reads them as checks)."""
    passed = all(c.ok for c in checks)
    lines = [c.line() for c in checks]
    lines += (f"   {note}" for note in notes)
    lines.append(f"{endpoint} check {'passed' if passed else 'failed'}")
    return (200 if passed else 500), "\n".join(lines) + "\n"
