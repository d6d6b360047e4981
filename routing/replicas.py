"""How a tenant partition's copy of a replicated definition (routing.decide.REPLICATED) differs
from the system partition's: what the proxy reports in a `Warning` header when the definition
is read, and counts when it syncs definitions (proxy/definitions_sync.py). Pure: objects in,
sentences out.

Two things are compared:
- the definition itself: every top-level field but `metadata` and `status` (spec, webhooks,
  value, handler, ...), plus labels and annotations. A difference means someone wrote one copy
  without the proxy (the copies are last-writer-wins);
- each condition the system partition's copy reports (`status.conditions[].type`): a TP whose
  copy has that condition with another status, or not at all, did not accept the definition the
  same way (a CRD not `Established` there, a name conflict, ...), with its reason and message.
"""

from __future__ import annotations

from typing import Any

# characters of a condition's message quoted in a difference: a sentence, not a document
_MESSAGE_CHARS = 160


def _definition(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}
    return {"body": body, "labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {}}


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    if not isinstance(conditions, list):
        return {}
    return {str(c.get("type")): c for c in conditions if isinstance(c, dict) and c.get("type")}


def copy_differences(system: dict[str, Any], copy: dict[str, Any]) -> list[str]:
    """How `copy` (a TP's object) differs from `system` (the system partition's): phrases such
    as "its definition differs" or "condition Established is False (NotAccepted: ...)"; [] when
    they agree."""
    out = []
    if _definition(system) != _definition(copy):
        out.append("its definition differs")
    theirs = _conditions(copy)
    for kind, ours in _conditions(system).items():
        other = theirs.get(kind)
        if other is None:
            out.append(f"condition {kind} is missing")
        elif other.get("status") != ours.get("status"):
            why = ": ".join(str(x) for x in (other.get("reason"), other.get("message")) if x)
            out.append(f"condition {kind} is {other.get('status')}" + (f" ({why[:_MESSAGE_CHARS]})" if why else ""))
    return out
