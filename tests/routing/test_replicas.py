"""How a TP's copy of a replicated definition differs from the system partition's (routing.replicas)."""

from __future__ import annotations

import copy
from typing import Any

from routing.replicas import copy_differences

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com", "uid": "a", "resourceVersion": "10", "creationTimestamp": "2026-11-24T00:00:00Z",
                 "generation": 1, "labels": {"team": "x"}},
    "spec": {"group": "example.com", "names": {"plural": "widgets", "kind": "Widget"}, "scope": "Namespaced"},
    "status": {"conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                              {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}],
               "acceptedNames": {"plural": "widgets", "kind": "Widget"}},
}


def test_a_copy_that_agrees_has_no_differences_whatever_its_server_set_metadata() -> None:
    theirs = copy.deepcopy(CRD)
    theirs["metadata"] |= {"uid": "b", "resourceVersion": "99", "creationTimestamp": "2026-11-24T00:00:05Z", "generation": 3}
    theirs["status"]["conditions"].reverse()
    theirs["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-24T00:00:06Z"
    assert copy_differences(CRD, theirs) == []


def test_a_definition_written_in_one_copy_or_a_label_differs() -> None:
    theirs = copy.deepcopy(CRD)
    theirs["spec"]["scope"] = "Cluster"
    assert copy_differences(CRD, theirs) == ["its definition differs"]
    theirs = copy.deepcopy(CRD)
    theirs["metadata"]["labels"] = {}
    assert copy_differences(CRD, theirs) == ["its definition differs"]


def test_a_condition_with_another_status_or_missing_is_named_with_its_reason() -> None:
    theirs = copy.deepcopy(CRD)
    theirs["status"]["conditions"] = [{"type": "NamesAccepted", "status": "False", "reason": "NotAccepted",
                                       "message": '"widgets" is already in use'}]
    assert copy_differences(CRD, theirs) == ["condition NamesAccepted is False (NotAccepted: \"widgets\" is already in use)",
                                             "condition Established is missing"]
    assert copy_differences({"spec": {}}, {"spec": {}, "status": {"conditions": "bad"}}) == []  # nothing to compare
