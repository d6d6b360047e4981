"""Label and field selectors (routing.selectors): the grammar, error texts and matching semantics of
`k8s.io/apimachinery@v0.36.3` pkg/labels/selector.go (labels.Parse) and pkg/fields/selector.go
(fields.ParseSelector), kube-apiserver v1.36's field label conversion and selectable fields, and
the soundness of `at_least_as_narrow_as`."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.selectors import (
    INT64_MAX,
    INT64_MIN,
    LABEL_OPERATORS,
    SELECTABLE_FIELDS,
    FieldRequirement,
    FieldSelector,
    LabelSelector,
    Requirement,
    SelectorError,
    normalise_field_selector,
    parse_field_selector,
    parse_label_selector,
    selectable_fields,
)

HYPOTHESIS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_NOT_AN_INTEGER = "for 'Gt', 'Lt' operators, the value must be an integer"
_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def req(key: str, operator: str, *values: str) -> Requirement:
    return Requirement(key, operator, frozenset(values))


def labels(*requirements: Requirement) -> LabelSelector:
    return LabelSelector(requirements)


# --- label selector grammar ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", labels()),
        (" \t\r\n ", labels()),
        ("a", labels(req("a", "exists"))),
        ("!a", labels(req("a", "!"))),
        ("! a", labels(req("a", "!"))),
        ("a=b", labels(req("a", "=", "b"))),
        ("a==b", labels(req("a", "=", "b"))),
        ("a = b", labels(req("a", "=", "b"))),
        ("a!=b", labels(req("a", "!=", "b"))),
        ("a=", labels(req("a", "=", ""))),
        ("a=,b", labels(req("a", "=", ""), req("b", "exists"))),
        ("a in (x,y)", labels(req("a", "in", "x", "y"))),
        ("a in(x, y)", labels(req("a", "in", "x", "y"))),
        ("a notin (x, y)", labels(req("a", "notin", "x", "y"))),
        ("\ta\nnotin\r(\tx ,y )", labels(req("a", "notin", "x", "y"))),
        ("a in (x,,y)", labels(req("a", "in", "x", "", "y"))),
        ("a in (,)", labels(req("a", "in", ""))),
        ("a in (x,)", labels(req("a", "in", "x", ""))),
        ("x>1", labels(req("x", ">", "1"))),
        ("x < 10", labels(req("x", "<", "10"))),
        ("x>007", labels(req("x", ">", "007"))),
        ("in in (in, notin)", labels(req("in", "in", "in", "notin"))),
        ("notin", labels(req("notin", "exists"))),
        ("example.com/app=web", labels(req("example.com/app", "=", "web"))),
        ("a=b,a==b, a = b", labels(req("a", "=", "b"))),
        ("b!=c , !d,e in (f),a=b", labels(req("a", "=", "b"), req("b", "!=", "c"), req("d", "!"), req("e", "in", "f"))),
        ("a \x00 ignored after a NUL", labels(req("a", "exists"))),
    ],
)
def test_parse_label_selector_accepts_the_labels_parse_grammar(text: str, expected: LabelSelector) -> None:
    assert parse_label_selector(text) == expected


def test_empty_value_set_means_the_empty_string_as_in_apimachinery() -> None:
    # labels.Parse documents "x in (foo,,baz),y,z notin ()" as valid: "()" is the set {""}.
    selector = parse_label_selector("x in (foo,,baz),y,z notin ()")

    assert selector == labels(req("x", "in", "foo", "", "baz"), req("y", "exists"), req("z", "notin", ""))
    assert parse_label_selector("a in ()").matches({"a": ""})
    assert not parse_label_selector("a in ()").matches({"a": "x"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a in", "unable to parse requirement: found '' expected: '('"),
        ("a in (", "unable to parse requirement: found '', expected: ',', ')' or identifier"),
        ("a in (x", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a in (x y)", "unable to parse requirement: found 'y', expected: ',' or ')'"),
        ("a in (x,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
        ("a in x", "unable to parse requirement: found 'x' expected: '('"),
        ("a=b=c", "found '=', expected: ',' or 'end of string'"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("a in (x)=", "found '=', expected: ',' or 'end of string'"),
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a!b", "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt"),
        ("a,", "found '', expected: identifier after ','"),
        ("a,,b", "found ',', expected: identifier after ','"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        ("a===b", "unable to parse requirement: found '=', expected: identifier"),
        ("a=(b)", "unable to parse requirement: found '(', expected: identifier"),
        ("-a=b", f'unable to parse requirement: <nil>: Invalid value: "-a": name part {_NAME_RULE}'),
        (
            "a/",
            f'unable to parse requirement: <nil>: Invalid value: "a/": name part must be non-empty; name part {_NAME_RULE}',
        ),
        ("x>a", f'unable to parse requirement: values[0]: Invalid value: "a": {_NOT_AN_INTEGER}'),
        ("x>", f'unable to parse requirement: values[0]: Invalid value: "": {_NOT_AN_INTEGER}'),
        ("x>-1", f'unable to parse requirement: values[0][x]: Invalid value: "-1": {_VALUE_RULE}'),
        (
            "x>-",
            f'unable to parse requirement: [values[0]: Invalid value: "-": {_NOT_AN_INTEGER}, '
            f'values[0][x]: Invalid value: "-": {_VALUE_RULE}]',
        ),
        (
            "x<99999999999999999999",
            f'unable to parse requirement: values[0]: Invalid value: "99999999999999999999": {_NOT_AN_INTEGER}',
        ),
        ('a="b"', f'unable to parse requirement: values[0][a]: Invalid value: "\\"b\\"": {_VALUE_RULE}'),
        (
            "a=" + "v" * 64,
            f'unable to parse requirement: values[0][a]: Invalid value: "{"v" * 64}": must be no more than 63 bytes',
        ),
    ],
)
def test_parse_label_selector_rejects_with_the_labels_parse_message(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as raised:
        parse_label_selector(text)

    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("a/b/c", "a valid label key must consist of"),
        ("/a", "prefix part must be non-empty"),
        ("Example.com/a", "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric"),
        ("e" * 254 + "/a", "prefix part must be no more than 253 bytes"),
        ("k" * 64, "name part must be no more than 63 bytes"),
        ("app:web", "name part must consist of"),
        ("é", "name part must consist of"),
    ],
)
def test_parse_label_selector_validates_keys_like_is_label_key(text: str, detail: str) -> None:
    with pytest.raises(SelectorError, match=r"^unable to parse requirement: <nil>: Invalid value: ") as raised:
        parse_label_selector(text)

    assert detail in str(raised.value)


def test_longest_valid_key_and_value_are_accepted() -> None:
    key = "e" * 253 + "/" + "k" * 63

    assert parse_label_selector(f"{key}={'v' * 63}") == labels(req(key, "=", "v" * 63))


# --- label selector matching --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "object_labels", "matched"),
    [
        ("", {}, True),
        ("a=x", {}, False),
        ("a=x", {"a": "x"}, True),
        ("a!=x", {}, True),
        ("a!=x", {"a": "x"}, False),
        ("a!=x", {"a": "y"}, True),
        ("a notin (x)", {}, True),
        ("a notin (x,y)", {"a": "y"}, False),
        ("a in (x,y)", {}, False),
        ("a", {"a": ""}, True),
        ("a", {"b": "x"}, False),
        ("!a", {"a": ""}, False),
        ("!a", {}, True),
        ("a=", {"a": ""}, True),
        ("a=", {}, False),
        ("x>1", {"x": "2"}, True),
        ("x>1", {"x": "1"}, False),
        ("x>1", {}, False),
        ("x>1", {"x": "abc"}, False),
        ("x>1", {"x": "007"}, True),
        ("x>1", {"x": "+3"}, True),
        ("x<10", {"x": "-5"}, True),
        ("x>1", {"x": "1_0"}, False),
        ("x>1", {"x": " 3"}, False),
        ("x>1", {"x": "\u0663"}, False),
        ("x<1", {"x": "-99999999999999999999"}, False),
        ("a=x,b", {"a": "x"}, False),
        ("a=x,b", {"a": "x", "b": ""}, True),
    ],
)
def test_label_selector_matches_like_requirement_matches(
    text: str, object_labels: dict[str, str], matched: bool
) -> None:
    assert parse_label_selector(text).matches(object_labels) is matched


@pytest.mark.parametrize(
    ("operator", "values", "error"),
    [
        ("==", (), "unsupported label selector operator"),
        ("=", (), "exactly one value"),
        ("=", ("x", "y"), "exactly one value"),
        ("in", (), "can't be empty"),
        ("exists", ("x",), "must be empty"),
        (">", ("x",), "must be an integer"),
        (">", (str(INT64_MAX + 1),), "must be an integer"),
    ],
)
def test_requirement_rejects_shapes_new_requirement_rejects(operator: str, values: tuple[str, ...], error: str) -> None:
    with pytest.raises(SelectorError, match=error):
        req("a", operator, *values)


# --- label selector narrowing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mine", "theirs", "narrower"),
    [
        ("a=x", "", True),
        ("", "a=x", False),
        ("", "", True),
        ("a=x", "a in (x,y)", True),
        ("a=x", "a", True),
        ("a=x", "a!=z", True),
        ("a=x", "a notin (z)", True),
        ("a=x", "a!=x", False),
        ("a in (x)", "a=x", True),
        ("a in (x,y)", "a=x", False),
        ("a in (x,y),a!=y", "a=x", True),
        ("a=x,b=y", "b=y", True),
        ("a=x", "b=x", False),
        ("a", "a=x", False),
        ("a", "a", True),
        ("!a", "a!=x", True),
        ("!a", "a notin (x)", True),
        ("!a", "a", False),
        ("a notin (x,y)", "a!=x", True),
        ("a!=x", "a notin (x,y)", False),
        ("a!=x", "a", False),
        ("x>5", "x>3", True),
        ("x>3", "x>5", False),
        ("x>5", "x", True),
        ("x>5", "x!=3", True),
        ("x>5", "x!=7", False),
        ("x>5", "x in (6,7)", False),
        ("x>5,x<3", "y=z", True),
        ("a=x,!a", "b=c", True),
        ("a=x,a=y", "b=c", True),
    ],
)
def test_at_least_as_narrow_as_decides_common_cases(mine: str, theirs: str, narrower: bool) -> None:
    assert parse_label_selector(mine).at_least_as_narrow_as(parse_label_selector(theirs)) is narrower


# --- field selectors ----------------------------------------------------------------------------


def fields(*terms: tuple[str, str, str]) -> FieldSelector:
    return FieldSelector(tuple(FieldRequirement(*term) for term in terms))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", fields()),
        (",", fields()),
        ("=,!=", fields()),
        ("spec.nodeName=", fields(("spec.nodeName", "=", ""))),
        ("spec.nodeName==node-1", fields(("spec.nodeName", "=", "node-1"))),
        (
            "status.phase!=Succeeded,status.phase!=Failed",
            fields(("status.phase", "!=", "Failed"), ("status.phase", "!=", "Succeeded")),
        ),
        ("metadata.name=a\\,b", fields(("metadata.name", "=", "a,b"))),
        ("metadata.name=a\\=b", fields(("metadata.name", "=", "a=b"))),
        ("metadata.name=a\\\\b", fields(("metadata.name", "=", "a\\b"))),
        ("a=b,,c!=d", fields(("a", "=", "b"), ("c", "!=", "d"))),
        ("a = b", fields(("a ", "=", " b"))),
        ("a\\,b=c", fields(("a\\,b", "=", "c"))),
        ("a=!b", fields(("a", "=", "!b"))),
        ("=x", fields(("", "=", "x"))),
    ],
)
def test_parse_field_selector_accepts_the_fields_parse_selector_grammar(text: str, expected: FieldSelector) -> None:
    assert parse_field_selector(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a", "invalid selector: 'a'; can't understand 'a'"),
        ("x=1,b", "invalid selector: 'x=1,b'; can't understand 'b'"),
        ("a=b=c", "invalid field selector: unescaped character in value: 61"),
        ("a===b", "invalid field selector: unescaped character in value: 61"),
        ("a=b\\", "invalid field selector: invalid escape sequence: \\"),
        ("a=\\x", "invalid field selector: invalid escape sequence: \\x"),
        ("spec.nodeName in (a)", "invalid selector: 'spec.nodeName in (a)'; can't understand 'spec.nodeName in (a)'"),
    ],
)
def test_parse_field_selector_rejects_with_the_fields_message(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as raised:
        parse_field_selector(text)

    assert str(raised.value) == message


def test_unscheduled_pods_are_selected_by_an_empty_node_name() -> None:
    unscheduled = selectable_fields("", "pods", {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}})
    scheduled = selectable_fields("", "pods", {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}})

    assert parse_field_selector("spec.nodeName=").matches(unscheduled)
    assert not parse_field_selector("spec.nodeName=").matches(scheduled)
    assert parse_field_selector("spec.nodeName=").matches({})


def test_field_selector_not_equals_matches_a_missing_field_unless_the_value_is_empty() -> None:
    assert parse_field_selector("status.phase!=Failed").matches({})
    assert not parse_field_selector("status.phase!=").matches({})


def test_field_selector_exposes_fields_and_exact_match() -> None:
    selector = parse_field_selector("spec.nodeName=n1,status.phase!=Failed")

    assert selector.fields() == {"spec.nodeName", "status.phase"}
    assert selector.requires_exact_match("spec.nodeName") == "n1"
    assert selector.requires_exact_match("status.phase") is None
    assert not selector.is_empty()
    assert parse_field_selector(",").is_empty()


@pytest.mark.parametrize(
    ("mine", "theirs", "narrower"),
    [
        ("spec.nodeName=n1", "", True),
        ("", "spec.nodeName=n1", False),
        ("spec.nodeName=n1,status.phase=Running", "spec.nodeName=n1", True),
        ("spec.nodeName=n1", "spec.nodeName==n1", True),
        ("spec.nodeName=n1", "spec.nodeName!=n2", True),
        ("spec.nodeName=n1", "spec.nodeName!=n1", False),
        ("spec.nodeName!=n1", "spec.nodeName!=n2", False),
        ("spec.nodeName=n1", "status.phase!=Failed", False),
        ("a=x,a=y", "b=z", True),
        ("a=x,a!=x", "b=z", True),
    ],
)
def test_field_selector_narrowing_decides_common_cases(mine: str, theirs: str, narrower: bool) -> None:
    assert parse_field_selector(mine).at_least_as_narrow_as(parse_field_selector(theirs)) is narrower


# --- field label conversion and selectable fields -----------------------------------------------


def test_spec_host_is_converted_to_spec_node_name_for_pods() -> None:
    selector = normalise_field_selector("", "pods", parse_field_selector("spec.host=n1"))

    assert selector == fields(("spec.nodeName", "=", "n1"))


@pytest.mark.parametrize(
    ("group", "resource", "text", "message"),
    [
        ("", "pods", "spec.foo=x", "field label not supported: spec.foo"),
        ("", "pods", "metadata.name=a,spec.containers=x", "field label not supported: spec.containers"),
        ("", "nodes", "metadata.namespace=x", "field label not supported: metadata.namespace"),
        ("", "nodes", "spec.host=x", "field label not supported: spec.host"),
        (
            "",
            "configmaps",
            "data.x=y",
            '"data.x" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        ("batch", "jobs", "spec.x=y", 'field label "spec.x" not supported for Job'),
        (
            "resource.k8s.io",
            "resourceslices",
            "spec.pool=y",
            "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.pool",
        ),
    ],
)
def test_unsupported_field_labels_are_rejected_like_the_conversion_func(
    group: str, resource: str, text: str, message: str
) -> None:
    with pytest.raises(SelectorError) as raised:
        normalise_field_selector(group, resource, parse_field_selector(text))

    assert str(raised.value) == message


def test_unknown_resources_keep_their_field_selector_for_their_apiserver() -> None:
    selector = parse_field_selector("spec.color=blue")

    assert normalise_field_selector("example.com", "widgets", selector) is selector
    assert ("example.com", "widgets") not in SELECTABLE_FIELDS


def test_selectable_fields_of_a_pod_render_like_to_selectable_fields() -> None:
    pod = {
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "nodeName": "n1",
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "hostNetwork": True,
        },
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}], "nominatedNodeName": "n2"},
    }

    assert selectable_fields("", "pods", pod) == {
        "metadata.name": "web",
        "metadata.namespace": "shop",
        "spec.nodeName": "n1",
        "spec.restartPolicy": "Always",
        "spec.schedulerName": "default-scheduler",
        "spec.serviceAccountName": "default",
        "spec.hostNetwork": "true",
        "status.phase": "Running",
        "status.podIP": "10.0.0.7",
        "status.nominatedNodeName": "n2",
    }
    assert set(selectable_fields("", "pods", pod)) <= SELECTABLE_FIELDS[("", "pods")]


def test_selectable_fields_render_missing_values_as_go_zero_values() -> None:
    pod = selectable_fields("", "pods", {"metadata": {"name": "p", "namespace": "ns"}, "status": {"podIP": "10.0.0.9"}})
    node = selectable_fields("", "nodes", {"metadata": {"name": "n1"}, "spec": {}})
    job = selectable_fields("batch", "jobs", {"metadata": {"name": "j", "namespace": "ns"}})

    assert pod["spec.hostNetwork"] == "false"
    assert pod["spec.nodeName"] == ""
    assert pod["status.podIP"] == "10.0.0.9"
    assert node == {"metadata.name": "n1", "spec.unschedulable": "false"}
    assert job["status.successful"] == "0"


def test_event_source_falls_back_to_the_reporting_controller() -> None:
    event = {
        "metadata": {"name": "e", "namespace": "ns"},
        "reportingComponent": "kubelet",
        "involvedObject": {"kind": "Pod"},
    }

    event_fields = selectable_fields("", "events", event)

    assert event_fields["source"] == "kubelet"
    assert event_fields["involvedObject.kind"] == "Pod"
    assert event_fields["involvedObject.name"] == ""


def test_unknown_resources_expose_only_metadata_fields() -> None:
    namespaced = selectable_fields("example.com", "widgets", {"metadata": {"name": "w", "namespace": "ns"}})
    cluster_scoped = selectable_fields("example.com", "gadgets", {"metadata": {"name": "g"}})

    assert namespaced == {"metadata.name": "w", "metadata.namespace": "ns"}
    assert cluster_scoped == {"metadata.name": "g"}


def test_component_selectors_filter_a_merged_pod_list() -> None:
    pods = [
        {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "b", "namespace": "ns"}, "spec": {"nodeName": "n2"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}},
        {"metadata": {"name": "d", "namespace": "ns"}, "spec": {}, "status": {"phase": "Pending"}},
    ]
    kubelet = normalise_field_selector("", "pods", parse_field_selector("spec.nodeName=n1"))
    scheduler = normalise_field_selector(
        "", "pods", parse_field_selector("status.phase!=Succeeded,status.phase!=Failed")
    )

    def names(selector: FieldSelector) -> list[str]:
        return [p["metadata"]["name"] for p in pods if selector.matches(selectable_fields("", "pods", p))]

    assert names(kubelet) == ["a", "c"]
    assert names(scheduler) == ["a", "b", "d"]


# --- properties ---------------------------------------------------------------------------------

_KEY_NAMES = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,6}[A-Za-z0-9])?", fullmatch=True)
_KEY_PREFIXES = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,4}[a-z0-9])?(\.[a-z0-9]{1,4}){0,2}", fullmatch=True)
_VALID_KEYS = st.one_of(_KEY_NAMES, st.builds("{}/{}".format, _KEY_PREFIXES, _KEY_NAMES))
_VALID_VALUES = st.one_of(st.just(""), _KEY_NAMES)
_VALID_BOUNDS = st.integers(min_value=0, max_value=INT64_MAX).map(str)  # a label value carries no sign


@st.composite
def valid_requirements(draw: st.DrawFn) -> Requirement:
    key = draw(_VALID_KEYS)
    operator = draw(st.sampled_from(sorted(LABEL_OPERATORS)))
    if operator in ("exists", "!"):
        return Requirement(key, operator)
    if operator in ("in", "notin"):
        return Requirement(key, operator, frozenset(draw(st.lists(_VALID_VALUES, min_size=1, max_size=3))))
    return Requirement(key, operator, frozenset({draw(_VALID_BOUNDS if operator in (">", "<") else _VALID_VALUES)}))


_VALID_SELECTORS = st.lists(valid_requirements(), max_size=4).map(lambda rs: LabelSelector(tuple(rs)))
_SPACE = st.sampled_from(["", " ", "\t", "\n", " \r\n "])
_SEPARATOR = st.sampled_from([" ", "\t", "\n", "  "])


@st.composite
def spelled_selectors(draw: st.DrawFn) -> tuple[LabelSelector, str]:
    """A valid selector and one of its spellings: any whitespace the lexer skips, `==` for `=`."""
    selector = draw(_VALID_SELECTORS)
    terms = []

    def space() -> str:
        return draw(_SPACE)

    for r in draw(st.permutations(selector.requirements)):
        if r.operator == "exists":
            terms.append(f"{space()}{r.key}{space()}")
        elif r.operator == "!":
            terms.append(f"{space()}!{space()}{r.key}{space()}")
        elif r.operator in ("in", "notin"):
            values = ",".join(f"{space()}{v}{space()}" for v in draw(st.permutations(sorted(r.values))))
            terms.append(f"{space()}{r.key}{draw(_SEPARATOR)}{r.operator}{space()}({values}){space()}")
        else:
            operator = draw(st.sampled_from(["=", "=="])) if r.operator == "=" else r.operator
            terms.append(f"{space()}{r.key}{space()}{operator}{space()}{next(iter(r.values))}{space()}")
    return selector, ",".join(terms)


@HYPOTHESIS
@given(selector=_VALID_SELECTORS)
def test_rendered_label_selectors_parse_back_to_the_same_selector(selector: LabelSelector) -> None:
    assert parse_label_selector(selector.render()) == selector


@HYPOTHESIS
@given(spelled=spelled_selectors())
def test_any_whitespace_and_order_spelling_parses_to_the_same_selector(spelled: tuple[LabelSelector, str]) -> None:
    selector, text = spelled

    assert parse_label_selector(text) == selector


# Small pools so that generated requirements and label sets collide often.
_KEYS = ["a", "b", "c"]
_VALUES = ["", "x", "y", "1", "5", "07", "in"]
_LABEL_VALUES = [*_VALUES, "-3", "+4", "1_0", " 5", "99999999999999999999", "zz"]
_BOUNDS = st.one_of(st.integers(min_value=-6, max_value=8).map(str), st.sampled_from([str(INT64_MAX), str(INT64_MIN)]))


@st.composite
def small_requirements(
    draw: st.DrawFn, keys: list[str] = _KEYS, values: list[str] = _VALUES, bounds: st.SearchStrategy[str] = _BOUNDS
) -> Requirement:
    key = draw(st.sampled_from(keys))
    operator = draw(st.sampled_from(sorted(LABEL_OPERATORS)))
    if operator in ("exists", "!"):
        return Requirement(key, operator)
    if operator in ("in", "notin"):
        return Requirement(key, operator, frozenset(draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))))
    return Requirement(key, operator, frozenset({draw(bounds if operator in (">", "<") else st.sampled_from(values))}))


_LABEL_SETS = st.dictionaries(st.sampled_from(_KEYS), st.sampled_from(_LABEL_VALUES), max_size=3)


def _reference_matches(r: Requirement, label_set: Mapping[str, str]) -> bool:
    """The rules of Requirement.Matches, written out independently."""
    value = label_set.get(r.key)
    if r.operator == "exists":
        return value is not None
    if r.operator == "!":
        return value is None
    if r.operator in ("=", "in"):
        return value is not None and value in r.values
    if r.operator in ("!=", "notin"):
        return value is None or value not in r.values
    if value is None or re.fullmatch(r"[+-]?[0-9]+", value) is None or not INT64_MIN <= int(value) <= INT64_MAX:
        return False
    bound = int(next(iter(r.values)))
    return int(value) > bound if r.operator == ">" else int(value) < bound


@HYPOTHESIS
@given(requirements=st.lists(small_requirements(), max_size=4), label_set=_LABEL_SETS)
def test_matches_agrees_with_a_direct_evaluation_of_the_requirements(
    requirements: list[Requirement], label_set: dict[str, str]
) -> None:
    selector = LabelSelector(tuple(requirements))

    assert selector.matches(label_set) == all(_reference_matches(r, label_set) for r in requirements)
    for r in requirements:
        assert r.matches(label_set) == _reference_matches(r, label_set)


def _integer_spellings(number: int) -> list[str]:
    spellings = [str(number), f"+{number}" if number >= 0 else f"-0{-number}"]
    if number >= 0:
        spellings.append(f"0{number}")
    return spellings


def _witness_states(selectors: tuple[LabelSelector, ...], key: str) -> list[str | None]:
    """Enough states of `key` (None = absent) to refute any false single-key implication between
    the requirements of `selectors`: their values, a fresh value, and integers around bounds in
    several spellings."""
    states: set[str] = {"zz", "", "0"}
    for selector in selectors:
        for r in selector.requirements:
            if r.key != key:
                continue
            states |= r.values
            for value in r.values:
                if r.operator in (">", "<") or re.fullmatch(r"[+-]?[0-9]+", value):
                    number = int(value)
                    for near in (number - 1, number, number + 1, number + 2):
                        if INT64_MIN <= near <= INT64_MAX:
                            states.update(_integer_spellings(near))
    return [None, *sorted(states)]


def _witness_label_sets(selectors: tuple[LabelSelector, ...], keys: list[str]) -> Iterator[dict[str, str]]:
    per_key = [_witness_states(selectors, key) for key in keys]
    for combination in itertools.product(*per_key):
        yield {key: value for key, value in zip(keys, combination, strict=True) if value is not None}


# Tiny pools for the narrowing properties: near misses (x>1 against x>2, a!=x against
# a notin (x,y)) must come up often for the properties to refute a wrong rule.
_PAIR_KEYS = ["a", "b"]
_PAIR_VALUES = ["", "x", "y", "1"]
_PAIR_BOUNDS = st.one_of(
    st.integers(min_value=-1, max_value=2).map(str),
    st.integers(min_value=-1, max_value=2).map(str),
    st.sampled_from([str(INT64_MAX), str(INT64_MIN)]),
)


def pair_requirements(keys: list[str] = _PAIR_KEYS) -> st.SearchStrategy[Requirement]:
    return small_requirements(keys, _PAIR_VALUES, _PAIR_BOUNDS)


@st.composite
def neighbours(draw: st.DrawFn, r: Requirement) -> Requirement:
    """A requirement on the same key as `r` that differs a little: any operator, with `r`'s
    values give or take one, or `r`'s bound give or take two (the near misses a wrong rule
    gets wrong)."""
    operator = draw(st.sampled_from(sorted(LABEL_OPERATORS)))
    if operator in ("exists", "!"):
        return Requirement(r.key, operator)
    near = sorted(r.values) or [draw(st.sampled_from(_PAIR_VALUES))]
    if operator in (">", "<"):
        base = int(near[0]) if r.operator in (">", "<") else draw(st.integers(min_value=-1, max_value=2))
        bound = min(max(base + draw(st.integers(min_value=-2, max_value=2)), INT64_MIN), INT64_MAX)
        return Requirement(r.key, operator, frozenset({str(bound)}))
    values = set(near) if r.operator not in (">", "<") else {draw(st.sampled_from(_PAIR_VALUES))}
    change = draw(st.sampled_from(["keep", "add", "drop"]))
    if change == "add":
        values.add(draw(st.sampled_from(_PAIR_VALUES)))
    elif change == "drop" and len(values) > 1:
        values.discard(draw(st.sampled_from(sorted(values))))
    if operator in ("in", "notin"):
        return Requirement(r.key, operator, frozenset(values))
    return Requirement(r.key, operator, frozenset({draw(st.sampled_from(sorted(values)))}))


@st.composite
def selector_pairs(draw: st.DrawFn) -> tuple[LabelSelector, LabelSelector]:
    """Two selectors: the first often constrains one key twice (`x>1,x<3`, `a in (x,y),a!=y`);
    the second is made of requirements of the first, their neighbours and unrelated ones, so
    that narrowing holds often and near misses are common."""
    mine = draw(st.lists(pair_requirements(), min_size=1, max_size=2))
    mine += [draw(neighbours(draw(st.sampled_from(mine)))) for _ in range(draw(st.integers(min_value=0, max_value=2)))]
    theirs = []
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        source = draw(st.sampled_from(mine))
        theirs.append(draw(st.one_of(st.just(source), neighbours(source), neighbours(source), pair_requirements())))
    return LabelSelector(tuple(mine)), LabelSelector(tuple(theirs))


@HYPOTHESIS
@given(pair=selector_pairs(), label_set=st.dictionaries(st.sampled_from(_PAIR_KEYS), st.sampled_from(_LABEL_VALUES)))
def test_at_least_as_narrow_as_is_sound(pair: tuple[LabelSelector, LabelSelector], label_set: dict[str, str]) -> None:
    mine, theirs = pair
    if not mine.at_least_as_narrow_as(theirs):
        return

    for candidate in [label_set, *_witness_label_sets(pair, _PAIR_KEYS)]:
        if mine.matches(candidate):
            assert theirs.matches(candidate), candidate


def _single_key_universe(values: list[str], bounds: list[str]) -> list[Requirement]:
    """Every requirement on key "a" over `values` and the integer `bounds`."""
    subsets = [frozenset(c) for n in range(1, len(values) + 1) for c in itertools.combinations(values, n)]
    return [
        Requirement("a", "exists"),
        Requirement("a", "!"),
        *(Requirement("a", op, frozenset({v})) for op in ("=", "!=") for v in values),
        *(Requirement("a", op, subset) for op in ("in", "notin") for subset in subsets),
        *(Requirement("a", op, frozenset({b})) for op in (">", "<") for b in bounds),
    ]


def test_single_requirement_implication_is_exact() -> None:
    universe = _single_key_universe(["", "x", "1"], ["-1", "0", "1", "2", str(INT64_MIN), str(INT64_MAX)])
    wrong = []
    for mine, theirs in itertools.product(universe, universe):
        pair = (LabelSelector((mine,)), LabelSelector((theirs,)))
        implied = all(theirs.matches(s) for s in _witness_label_sets(pair, ["a"]) if mine.matches(s))
        if pair[0].at_least_as_narrow_as(pair[1]) != implied:
            wrong.append((mine.render(), theirs.render(), implied))

    assert wrong == []


def test_narrowing_from_two_requirements_on_one_key_is_sound() -> None:
    # Exhaustive over a small universe: conjunctions on one key (`x>0,x<2`, `a in (x,1),a!=1`,
    # `a=x,!a`) are where the finite-state and empty-range rules apply.
    universe = _single_key_universe(["x", "1"], ["0", "1", "2"])
    unsound = []
    for first, second in itertools.combinations_with_replacement(universe, 2):
        mine = LabelSelector((first, second))
        for theirs in (LabelSelector((r,)) for r in universe):
            if not mine.at_least_as_narrow_as(theirs):
                continue
            for candidate in _witness_label_sets((mine, theirs), ["a"]):
                if mine.matches(candidate) and not theirs.matches(candidate):
                    unsound.append((mine.render(), theirs.render(), candidate))

    assert unsound == []


@HYPOTHESIS
@given(selector=st.lists(small_requirements(), max_size=4).map(lambda rs: LabelSelector(tuple(rs))))
def test_every_selector_is_at_least_as_narrow_as_itself_and_the_empty_one(selector: LabelSelector) -> None:
    assert selector.at_least_as_narrow_as(selector)
    assert selector.at_least_as_narrow_as(LabelSelector())


_FIELD_NAMES = st.from_regex(r"[a-z]{1,3}(\.[a-zA-Z]{1,4})?", fullmatch=True)
_FIELD_VALUES = st.text(alphabet="ab\\,=! é", max_size=6)
_FIELD_SELECTORS = st.lists(
    st.builds(FieldRequirement, _FIELD_NAMES, st.sampled_from(["=", "!="]), _FIELD_VALUES), max_size=4
).map(lambda rs: FieldSelector(tuple(rs)))


@HYPOTHESIS
@given(selector=_FIELD_SELECTORS)
def test_rendered_field_selectors_parse_back_to_the_same_selector(selector: FieldSelector) -> None:
    assert parse_field_selector(selector.render()) == selector


_SMALL_FIELD_SELECTORS = st.lists(
    st.builds(
        FieldRequirement, st.sampled_from(["f", "g"]), st.sampled_from(["=", "!="]), st.sampled_from(["", "x", "y"])
    ),
    max_size=3,
).map(lambda rs: FieldSelector(tuple(rs)))
_FIELD_SETS = st.dictionaries(st.sampled_from(["f", "g"]), st.sampled_from(["", "x", "y", "z"]))


@HYPOTHESIS
@given(selector=_SMALL_FIELD_SELECTORS, field_set=_FIELD_SETS)
def test_field_selector_matches_agrees_with_a_direct_evaluation(
    selector: FieldSelector, field_set: dict[str, str]
) -> None:
    expected = all(
        (field_set.get(r.field, "") == r.value) if r.operator == "=" else (field_set.get(r.field, "") != r.value)
        for r in selector.requirements
    )

    assert selector.matches(field_set) is expected


@HYPOTHESIS
@given(mine=_SMALL_FIELD_SELECTORS, theirs=_SMALL_FIELD_SELECTORS)
def test_field_selector_narrowing_is_sound(mine: FieldSelector, theirs: FieldSelector) -> None:
    if not mine.at_least_as_narrow_as(theirs):
        return

    states = [None, "", "x", "y", "zz"]
    for f_value, g_value in itertools.product(states, states):
        candidate = {k: v for k, v in (("f", f_value), ("g", g_value)) if v is not None}
        if mine.matches(candidate):
            assert theirs.matches(candidate), candidate
