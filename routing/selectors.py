"""Kubernetes label and field selectors: parse, match, compare (pure; no I/O).

Owns: the grammar and semantics of the `labelSelector` and `fieldSelector` query parameters as
kube-apiserver applies them, so the proxy can filter merged caches itself, and decide when one
selector's result set contains another's (`at_least_as_narrow_as`). Does not own: deciding
*whether* to serve from a cache or forward a selector unchanged (`routing.cache_policy`,
`routing.decide`), nor the HTTP error sent for a bad selector (`routing.status`;
kube-apiserver answers 400 BadRequest with `str(SelectorError)` as the message).

Sources of the semantics, at the versions the partitions run (hack/k8s/go.mod):

- label selectors: `k8s.io/apimachinery@v0.36.3 pkg/labels/selector.go` (Lexer, Parser,
  NewRequirement, Requirement.Matches), operator names `pkg/selection/operator.go`, key and value
  validation `pkg/api/validate/content` (IsLabelKey, IsLabelValue, IsDNS1123Subdomain). The
  lexer and parser are ported token for token, so whitespace (space, tab, CR, LF), `in`/`notin`
  used as keys or values, `a in ()` (= `a in ("")`), `(x,,y)` and the error texts are those of
  `labels.Parse`, e.g. `unable to parse requirement: <nil>: Invalid value: "-a": name part ...`.
- field selectors: `k8s.io/apimachinery@v0.36.3 pkg/fields/selector.go` (splitTerms, splitTerm,
  UnescapeValue, hasTerm/notHasTerm): no whitespace trimming, no validation of field names at
  parse time, `\\`, `\\,`, `\\=` escapes in values, a field missing from the object compares as "".
- field labels per resource: `k8s.io/kubernetes@v1.36.3` `pkg/apis/*/v1/conversion.go`
  (AddFieldLabelConversionFunc; `spec.host` -> `spec.nodeName` for pods), `pkg/registry/*/*/
  strategy.go` (ToSelectableFields, GetAttrs), and `runtime.DefaultMetaV1FieldSelectorConversion`
  for every built-in kind without its own conversion func.

Deliberate representation choices (no change to the set of objects a selector matches):
selectors are kept canonical (requirements de-duplicated and sorted by key, operator, values) so
equal selectors compare equal; `==` is stored as `=`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final


class SelectorError(ValueError):
    """A selector kube-apiserver would reject; the message is the one apimachinery produces
    (e.g. "unable to parse requirement: found '', expected: identifier", "invalid field
    selector: invalid escape sequence: \\x", "field label not supported: spec.foo")."""


# --- Go-compatible primitives -------------------------------------------------------------------

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
# strconv.ParseInt(s, 10, 64) syntax: optional sign, ASCII digits, nothing else (no spaces, no
# underscores, no non-ASCII digits, all of which Python's int() would accept).
_GO_DECIMAL = re.compile(r"[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """`strconv.ParseInt(text, 10, 64)`: the integer, or None where Go returns an error."""
    if _GO_DECIMAL.fullmatch(text) is None:
        return None
    number = int(text)
    return number if INT64_MIN <= number <= INT64_MAX else None


_GO_QUOTE_ESCAPES: Final = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _go_quote(text: str) -> str:
    """Go's `%q` (strconv.Quote) of a string, as field.Error prints a bad value."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in _GO_QUOTE_ESCAPES:
            out.append(_GO_QUOTE_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def _byte_len(text: str) -> int:
    """Go's len(): bytes of the UTF-8 encoding."""
    return len(text.encode("utf-8", "surrogatepass"))


# --- label key and value validation (apimachinery pkg/api/validate/content) ---------------------

LABEL_NAME_MAX_BYTES: Final = 63  # content.labelKeyMaxLength: the name part of a key
LABEL_VALUE_MAX_BYTES: Final = 63  # content.LabelValueMaxLength
DNS1123_SUBDOMAIN_MAX_BYTES: Final = 253  # content.DNS1123SubdomainMaxLength: the key prefix

_LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_RE = re.compile(_LABEL_KEY_FMT)
_LABEL_KEY_ERR: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT: Final = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_LABEL_VALUE_ERR: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1123_SUBDOMAIN_ERR: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """content.RegexError, double spaces included."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len_error(limit: int) -> str:
    return f"must be no more than {limit} bytes"


def _dns1123_subdomain_errors(value: str) -> list[str]:
    errors = []
    if _byte_len(value) > DNS1123_SUBDOMAIN_MAX_BYTES:
        errors.append(_max_len_error(DNS1123_SUBDOMAIN_MAX_BYTES))
    if _DNS1123_SUBDOMAIN_RE.fullmatch(value) is None:
        errors.append(_regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def label_key_errors(key: str) -> list[str]:
    """`content.IsLabelKey`: why `key` is not a valid label key ([] when it is).

    A key is an optional DNS-1123 subdomain prefix (<= 253 bytes) and '/', then a name of
    <= 63 bytes of [A-Za-z0-9_.-] starting and ending alphanumeric.
    """
    parts = key.split("/")
    errors: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + message for message in _dns1123_subdomain_errors(prefix))
    else:
        return [
            "a valid label key "
            + _regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif _byte_len(name) > LABEL_NAME_MAX_BYTES:
        errors.append("name part " + _max_len_error(LABEL_NAME_MAX_BYTES))
    if _LABEL_KEY_RE.fullmatch(name) is None:
        errors.append("name part " + _regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errors


def label_value_errors(value: str) -> list[str]:
    """`content.IsLabelValue`: why `value` is not a valid label value ([] when it is; "" is valid)."""
    errors = []
    if _byte_len(value) > LABEL_VALUE_MAX_BYTES:
        errors.append(_max_len_error(LABEL_VALUE_MAX_BYTES))
    if _LABEL_VALUE_RE.fullmatch(value) is None:
        errors.append(_regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


def _invalid(path: str, value: str, detail: str) -> str:
    """field.Invalid(path, value, detail).Error()."""
    return f"{path}: Invalid value: {_go_quote(value)}: {detail}"


def _aggregate(messages: Sequence[str]) -> str:
    """utilerrors.Aggregate.Error() of field.ErrorList.ToAggregate(): de-duplicated, bracketed if > 1."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# --- label selectors ----------------------------------------------------------------------------

LABEL_OPERATORS: Final = frozenset({"=", "!=", "in", "notin", "exists", "!", ">", "<"})
_SET_OPERATORS: Final = frozenset({"in", "notin"})
_SINGLE_VALUE_OPERATORS: Final = frozenset({"=", "!=", ">", "<"})
_INTEGER_OPERATORS: Final = frozenset({">", "<"})
_ABSENT_MATCHING_OPERATORS: Final = frozenset({"!=", "notin", "!"})  # also match a missing key


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement of a label selector (apimachinery labels.Requirement).

    `operator` is one of "=", "!=", "in", "notin", "exists", "!", ">", "<" ("==" is stored as
    "="). `values`: one value for "=", "!=", ">", "<" (an int64 in decimal for ">"/"<"); at
    least one for "in"/"notin" ("" is a value); none for "exists"/"!". The constructor checks
    only these shapes (SelectorError otherwise); key and value syntax is checked by
    `parse_label_selector`.
    """

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        op, count = self.operator, len(self.values)
        if op not in LABEL_OPERATORS:
            raise SelectorError(f"unsupported label selector operator {op!r}")
        if op in _SINGLE_VALUE_OPERATORS and count != 1:
            raise SelectorError(f"operator {op!r} takes exactly one value, got {count}")
        if op in _SET_OPERATORS and count == 0:
            raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
        if op in ("exists", "!") and count != 0:
            raise SelectorError("values set must be empty for exists and does not exist")
        if op in _INTEGER_OPERATORS and _parse_int64(next(iter(self.values))) is None:
            raise SelectorError("for 'Gt', 'Lt' operators, the value must be an integer")

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Requirement.Matches: "!=", "notin" and "!" match a missing key; ">"/"<" need the key
        present with a value strconv.ParseInt accepts, compared as int64."""
        op = self.operator
        present = self.key in labels
        if op == "exists":
            return present
        if op == "!":
            return not present
        if op in ("=", "in"):
            return present and labels[self.key] in self.values
        if op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        have = _parse_int64(labels[self.key])
        if have is None:
            return False
        low, high = _interval(self)
        return low <= have <= high

    def render(self) -> str:
        """Requirement.String(): `k`, `!k`, `k=v`, `k!=v`, `k>5`, `k in (a,b)`; values sorted.
        `parse_label_selector` reads it back to an equal Requirement when key and values are
        valid."""
        op = self.operator
        if op == "exists":
            return self.key
        if op == "!":
            return "!" + self.key
        joined = ",".join(sorted(self.values))
        if op in _SET_OPERATORS:
            return f"{self.key} {op} ({joined})"
        return f"{self.key}{op}{joined}"


def _requirement_order(requirement: Requirement) -> tuple[str, str, tuple[str, ...]]:
    return (requirement.key, requirement.operator, tuple(sorted(requirement.values)))


def _interval(requirement: Requirement) -> tuple[int, int]:
    """The int64 range a ">"/"<" requirement accepts, inclusive; empty when low > high."""
    bound = _parse_int64(next(iter(requirement.values)))
    assert bound is not None  # checked in Requirement.__post_init__
    if requirement.operator == ">":
        return bound + 1, INT64_MAX
    return INT64_MIN, bound - 1


def _unsatisfiable(requirement: Requirement) -> bool:
    if requirement.operator not in _INTEGER_OPERATORS:
        return False
    low, high = _interval(requirement)
    return low > high


def _implies(mine: Requirement, theirs: Requirement) -> bool:
    """True when every label set matching `mine` matches `theirs`; exact when keys are equal.

    Label values are unbounded strings, so a non-empty ">"/"<" range has infinitely many
    matching values ("7", "07", "+7", ...), and "exists"/"!="/"notin" accept infinitely many.
    """
    if _unsatisfiable(mine):
        return True
    if mine.key != theirs.key:
        return False  # no requirement holds for every state of a key it names
    if mine.operator in _ABSENT_MATCHING_OPERATORS and not theirs.matches({}):
        return False
    key, op = mine.key, mine.operator
    if op in ("=", "in"):
        return all(theirs.matches({key: value}) for value in mine.values)
    if op == "!":
        return True
    if op == "exists":
        return theirs.operator == "exists"
    if op in ("!=", "notin"):
        return theirs.operator in ("!=", "notin") and theirs.values <= mine.values
    low, high = _interval(mine)  # ">" or "<", non-empty
    if theirs.operator == "exists":
        return True
    if theirs.operator in ("!=", "notin"):
        excluded = (_parse_int64(value) for value in theirs.values)
        return not any(number is not None and low <= number <= high for number in excluded)
    if theirs.operator in _INTEGER_OPERATORS:
        their_low, their_high = _interval(theirs)
        return their_low <= low and high <= their_high
    return False


def _finite_states(key: str, requirements: Sequence[Requirement]) -> list[dict[str, str]] | None:
    """Every state of `key` (absent, or one value) the requirements on it allow together, when
    there are finitely many (some "="/"in", or a "!"); None otherwise."""
    finite = [r.values for r in requirements if r.operator in ("=", "in")]
    if finite:
        candidates = frozenset.intersection(*finite)
        states = [{key: value} for value in sorted(candidates)]
    elif any(r.operator == "!" for r in requirements):
        states = [{}]
    else:
        return None
    return [state for state in states if all(r.matches(state) for r in requirements)]


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector: the AND of its requirements. Canonical: requirements are
    de-duplicated and sorted by key, operator, values on construction. No requirements matches
    everything (labels.Everything())."""

    requirements: tuple[Requirement, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "requirements", tuple(sorted(set(self.requirements), key=_requirement_order)))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when every requirement matches `labels` (an object's metadata.labels)."""
        return all(requirement.matches(labels) for requirement in self.requirements)

    def is_empty(self) -> bool:
        """True for the selector that matches everything ("" or whitespace)."""
        return not self.requirements

    def render(self) -> str:
        """Selector.String(): requirements joined by ","; "" for the empty selector."""
        return ",".join(requirement.render() for requirement in self.requirements)

    def at_least_as_narrow_as(self, other: LabelSelector) -> bool:
        """True only if every label set this selector matches is also matched by `other`.

        Sound, not complete: True when `other` is empty, when this selector is unsatisfiable in a
        way visible per key, or when each requirement of `other` follows from the requirements of
        this selector on the same key: from one of them (e.g. `a=x` implies `a in (x,y)`, `a`,
        `a!=z`, `a notin (z)`; `a in (x)` implies `a=x`; `!a` implies `a!=x`; `x>5` implies `x>3`
        and `x`), or from all of them when they leave finitely many states of the key
        (`a in (x,y),a!=y` implies `a=x`). Implications across keys are never found.
        """
        if other.is_empty() or self._unsatisfiable():
            return True
        return all(self._implies(requirement) for requirement in other.requirements)

    def _on_key(self, key: str) -> list[Requirement]:
        return [r for r in self.requirements if r.key == key]

    def _implies(self, theirs: Requirement) -> bool:
        mine = self._on_key(theirs.key)
        if any(_implies(requirement, theirs) for requirement in mine):
            return True
        states = _finite_states(theirs.key, mine)
        return states is not None and all(theirs.matches(state) for state in states)

    def _unsatisfiable(self) -> bool:
        for key in {r.key for r in self.requirements}:
            mine = self._on_key(key)
            if _finite_states(key, mine) == []:
                return True
            ranges = [_interval(r) for r in mine if r.operator in _INTEGER_OPERATORS]
            if ranges and max(low for low, _ in ranges) > min(high for _, high in ranges):
                return True
        return False


# The lexer and parser of labels.Parse, ported token for token (selector.go Lexer/Parser).
# Token numbers as in selector.go (ErrorToken = 0 ... OpenParToken).
(
    _ERROR,
    _EOS,
    _CLOSE_PAR,
    _COMMA,
    _NOT,
    _DOUBLE_EQUALS,
    _EQUALS,
    _GT,
    _ID,
    _IN,
    _LT,
    _NOT_EQUALS,
    _NOT_IN,
    _OPEN_PAR,
) = range(14)
_STRING_TO_TOKEN: Final = {
    ")": _CLOSE_PAR,
    ",": _COMMA,
    "!": _NOT,
    "==": _DOUBLE_EQUALS,
    "=": _EQUALS,
    ">": _GT,
    "in": _IN,
    "<": _LT,
    "!=": _NOT_EQUALS,
    "notin": _NOT_IN,
    "(": _OPEN_PAR,
}
_BINARY_OPERATOR_TOKENS: Final = {
    _IN: "in",
    _EQUALS: "=",
    _DOUBLE_EQUALS: "=",
    _GT: ">",
    _LT: "<",
    _NOT_IN: "notin",
    _NOT_EQUALS: "!=",
}
_SPECIAL_SYMBOLS: Final = frozenset("=!(),><")
_WHITESPACE: Final = frozenset(" \t\r\n")
_END: Final = "\0"  # Lexer.read() returns byte 0 at the end; a NUL in the input reads the same


class _Lexer:
    __slots__ = ("_pos", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0

    def _read(self) -> str:
        if self._pos < len(self._text):
            self._pos += 1
            return self._text[self._pos - 1]
        return _END

    def _unread(self) -> None:
        self._pos -= 1

    def lex(self) -> tuple[int, str]:
        ch = self._read()
        while ch in _WHITESPACE:
            ch = self._read()
        if ch == _END:
            return _EOS, ""
        self._unread()
        if ch in _SPECIAL_SYMBOLS:
            return self._scan_special_symbol()
        return self._scan_id_or_keyword()

    def _scan_id_or_keyword(self) -> tuple[int, str]:
        chars = []
        while True:
            ch = self._read()
            if ch == _END:
                break
            if ch in _SPECIAL_SYMBOLS or ch in _WHITESPACE:
                self._unread()
                break
            chars.append(ch)
        literal = "".join(chars)
        return _STRING_TO_TOKEN.get(literal, _ID), literal

    def _scan_special_symbol(self) -> tuple[int, str]:
        buffer = ""
        last: tuple[int, str] | None = None
        while True:
            ch = self._read()
            if ch == _END:
                break
            if ch not in _SPECIAL_SYMBOLS:
                self._unread()
                break
            buffer += ch
            token = _STRING_TO_TOKEN.get(buffer)
            if token is not None:
                last = (token, buffer)
            elif last is not None:
                self._unread()
                break
        if last is None:
            return _ERROR, f"error expected: keyword found '{buffer}'"
        return last


class _RequirementError(Exception):
    """A parse error inside one requirement; labels.Parse prefixes "unable to parse requirement: "."""


class _Parser:
    __slots__ = ("_items", "_pos")

    def __init__(self, text: str) -> None:
        lexer = _Lexer(text)
        self._items: list[tuple[int, str]] = []
        while True:
            item = lexer.lex()
            self._items.append(item)
            if item[0] == _EOS:
                break
        self._pos = 0

    def _lookahead(self, *, values: bool) -> tuple[int, str]:
        """In the Values context `in` and `notin` are identifiers (`in in (in)` is valid)."""
        token, literal = self._items[min(self._pos, len(self._items) - 1)]
        if values and token in (_IN, _NOT_IN):
            token = _ID
        return token, literal

    def _consume(self, *, values: bool) -> tuple[int, str]:
        item = self._lookahead(values=values)
        self._pos += 1
        return item

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            token, literal = self._lookahead(values=True)
            if token == _EOS:
                return requirements
            if token not in (_ID, _NOT):
                raise SelectorError(f"found '{literal}', expected: !, identifier, or 'end of string'")
            try:
                requirements.append(self._parse_requirement())
            except _RequirementError as err:
                raise SelectorError(f"unable to parse requirement: {err}") from None
            token, literal = self._consume(values=True)
            if token == _EOS:
                return requirements
            if token != _COMMA:
                raise SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
            token, literal = self._lookahead(values=True)
            if token not in (_ID, _NOT):
                raise SelectorError(f"found '{literal}', expected: identifier after ','")

    def _parse_requirement(self) -> Requirement:
        key, operator = self._parse_key_and_infer_operator()
        if operator in ("exists", "!"):
            return _new_requirement(key, operator, [])
        operator = self._parse_operator()
        values = self._parse_values() if operator in _SET_OPERATORS else self._parse_exact_value()
        return _new_requirement(key, operator, sorted(values))

    def _parse_key_and_infer_operator(self) -> tuple[str, str]:
        operator = ""
        token, literal = self._consume(values=True)
        if token == _NOT:
            operator = "!"
            token, literal = self._consume(values=True)
        if token != _ID:
            raise _RequirementError(f"found '{literal}', expected: identifier")
        if errors := label_key_errors(literal):
            raise _RequirementError(_invalid("<nil>", literal, "; ".join(errors)))
        if self._lookahead(values=True)[0] in (_EOS, _COMMA) and operator != "!":
            operator = "exists"
        return literal, operator

    def _parse_operator(self) -> str:
        token, literal = self._consume(values=False)
        operator = _BINARY_OPERATOR_TOKENS.get(token)
        if operator is None:
            raise _RequirementError(f"found '{literal}', expected: in, notin, =, ==, !=, gt, lt")
        return operator

    def _parse_values(self) -> set[str]:
        token, literal = self._consume(values=True)
        if token != _OPEN_PAR:
            raise _RequirementError(f"found '{literal}' expected: '('")
        token, literal = self._lookahead(values=True)
        if token in (_ID, _COMMA):
            values = self._parse_identifiers_list()
            if self._consume(values=True)[0] != _CLOSE_PAR:  # unreachable, as in Go
                raise _RequirementError(f"found '{literal}', expected: ')'")
            return values
        if token == _CLOSE_PAR:  # "()" is the set {""}
            self._consume(values=True)
            return {""}
        raise _RequirementError(f"found '{literal}', expected: ',', ')' or identifier")

    def _parse_identifiers_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            token, literal = self._consume(values=True)
            if token == _ID:
                values.add(literal)
                next_token, next_literal = self._lookahead(values=True)
                if next_token == _COMMA:
                    continue
                if next_token == _CLOSE_PAR:
                    return values
                raise _RequirementError(f"found '{next_literal}', expected: ',' or ')'")
            if token != _COMMA:
                raise _RequirementError(f"found '{literal}', expected: ',', or identifier")
            if not values:
                values.add("")  # "(,"
            next_token = self._lookahead(values=True)[0]
            if next_token == _CLOSE_PAR:
                values.add("")  # ",)"
                return values
            if next_token == _COMMA:
                values.add("")  # ",,"

    def _parse_exact_value(self) -> set[str]:
        if self._lookahead(values=True)[0] in (_EOS, _COMMA):
            return {""}
        token, literal = self._consume(values=True)
        if token == _ID:
            return {literal}
        raise _RequirementError(f"found '{literal}', expected: identifier")


def _new_requirement(key: str, operator: str, values: list[str]) -> Requirement:
    """labels.NewRequirement with a nil field path; `values` sorted as sets.String.List()."""
    errors = []
    if key_errors := label_key_errors(key):
        errors.append(_invalid("key", key, "; ".join(key_errors)))
    if operator in _INTEGER_OPERATORS:
        for index, value in enumerate(values):
            if _parse_int64(value) is None:
                detail = "for 'Gt', 'Lt' operators, the value must be an integer"
                errors.append(_invalid(f"values[{index}]", value, detail))
    for index, value in enumerate(values):
        if value_errors := label_value_errors(value):
            errors.append(_invalid(f"values[{index}][{key}]", value, "; ".join(value_errors)))
    if errors:
        raise _RequirementError(_aggregate(errors))
    return Requirement(key, operator, frozenset(values))


def parse_label_selector(text: str) -> LabelSelector:
    """`labels.Parse(text)`: the selector, or SelectorError with apimachinery's message.

    Grammar: requirements separated by "," (ANDed): `k`, `!k`, `k=v`, `k==v`, `k!=v`,
    `k in (v,...)`, `k notin (v,...)`, `k>N`, `k<N`. Whitespace (space, tab, CR, LF) may
    separate any tokens. Keys and values are validated as label keys and values; `in ()` is the
    set {""}; ">"/"<" need an int64 (a label value, so in practice non-negative digits).
    "" and whitespace-only text give the empty selector (matches everything).
    """
    return LabelSelector(tuple(_Parser(text).parse()))


# --- field selectors ----------------------------------------------------------------------------

FIELD_OPERATORS: Final = frozenset({"=", "!="})


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    """One term of a field selector: `field=value` (also written `==`) or `field!=value`."""

    field: str
    operator: str
    value: str

    def __post_init__(self) -> None:
        if self.operator not in FIELD_OPERATORS:
            raise SelectorError(f"unsupported field selector operator {self.operator!r}")

    def matches(self, fields: Mapping[str, str]) -> bool:
        """hasTerm/notHasTerm.Matches: a field missing from `fields` compares as ""."""
        return (fields.get(self.field, "") == self.value) == (self.operator == "=")

    def render(self) -> str:
        """`field=value` with the value escaped (fields.EscapeValue). The field is written as is:
        faithful for field names without ',', '=' or a trailing '!' (all real ones)."""
        return f"{self.field}{self.operator}{_escape_field_value(self.value)}"


def _field_order(requirement: FieldRequirement) -> tuple[str, str, str]:
    return (requirement.field, requirement.operator, requirement.value)


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A parsed field selector: the AND of its terms; canonical (de-duplicated, sorted)."""

    requirements: tuple[FieldRequirement, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "requirements", tuple(sorted(set(self.requirements), key=_field_order)))

    def matches(self, fields: Mapping[str, str]) -> bool:
        """True when every term matches `fields` (see `selectable_fields`); missing fields are ""."""
        return all(requirement.matches(fields) for requirement in self.requirements)

    def is_empty(self) -> bool:
        """True for the selector that matches everything ("" or only commas)."""
        return not self.requirements

    def fields(self) -> frozenset[str]:
        """The field names the selector tests."""
        return frozenset(requirement.field for requirement in self.requirements)

    def requires_exact_match(self, field: str) -> str | None:
        """Selector.RequiresExactMatch: the value an `=` term demands of `field`, else None
        (e.g. the node of a kubelet's `spec.nodeName=<node>` pod watch)."""
        for requirement in self.requirements:
            if requirement.field == field and requirement.operator == "=":
                return requirement.value
        return None

    def render(self) -> str:
        """Terms joined by ","; `parse_field_selector` reads it back to an equal selector."""
        return ",".join(requirement.render() for requirement in self.requirements)

    def at_least_as_narrow_as(self, other: FieldSelector) -> bool:
        """True only if every field set this selector matches is also matched by `other`.

        Sound: True when `other` is empty, when this selector cannot match (`f=a,f=b`,
        `f=a,f!=a`), or when each term of `other` is a term of this selector or is `f!=w`
        while this selector has `f=v` with v != w.
        """
        if other.is_empty() or self._unsatisfiable():
            return True
        mine = set(self.requirements)
        equals = {(r.field, r.value) for r in self.requirements if r.operator == "="}
        for theirs in other.requirements:
            if theirs in mine:
                continue
            if theirs.operator == "!=" and any(f == theirs.field and v != theirs.value for f, v in equals):
                continue
            return False
        return True

    def _unsatisfiable(self) -> bool:
        wanted: dict[str, set[str]] = {}
        for requirement in self.requirements:
            if requirement.operator == "=":
                wanted.setdefault(requirement.field, set()).add(requirement.value)
        if any(len(values) > 1 for values in wanted.values()):
            return True
        return any(
            r.operator == "!=" and r.value in wanted.get(r.field, ()) for r in self.requirements
        )


def _split_terms(text: str) -> list[str]:
    """fields.splitTerms: split on commas not escaped by a backslash (escapes kept)."""
    if not text:
        return []
    terms = []
    start = 0
    in_slash = False
    for index, ch in enumerate(text):
        if in_slash:
            in_slash = False
        elif ch == "\\":
            in_slash = True
        elif ch == ",":
            terms.append(text[start:index])
            start = index + 1
    terms.append(text[start:])
    return terms


_TERM_OPERATORS: Final = ("!=", "==", "=")


def _split_term(term: str) -> tuple[str, str, str] | None:
    """fields.splitTerm: split at the first operator; the field part is never unescaped."""
    for index in range(len(term)):
        for operator in _TERM_OPERATORS:
            if term.startswith(operator, index):
                return term[:index], operator, term[index + len(operator) :]
    return None


def _unescape_field_value(value: str) -> str:
    """fields.UnescapeValue: `\\\\`, `\\,`, `\\=` are the only escapes; bare `,`/`=` are errors."""
    if not any(ch in value for ch in "\\,="):
        return value
    out = []
    in_slash = False
    for ch in value:
        if in_slash:
            if ch not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            in_slash = False
        elif ch == "\\":
            in_slash = True
        elif ch in ",=":
            # UnescapedRune prints the rune with %v: its code point in decimal.
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if in_slash:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _escape_field_value(value: str) -> str:
    """fields.EscapeValue."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def parse_field_selector(text: str) -> FieldSelector:
    """`fields.ParseSelector(text)`: the selector, or SelectorError with apimachinery's message.

    Terms are split on unescaped ","; empty terms, and terms with neither field nor value (`=`,
    `!=`), are dropped; each term splits at the first "!=", "==" or "=" (in that order of
    preference at each position). Nothing is trimmed:
    `a = b` is field "a " and value " b". Field names are not checked here; see
    `normalise_field_selector`. Terms are examined in sorted order, so with several bad terms
    the error names the same one kube-apiserver names.
    """
    requirements = []
    for term in sorted(_split_terms(text)):
        if not term:
            continue
        split = _split_term(term)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        field, operator, raw_value = split
        value = _unescape_field_value(raw_value)
        if field or value:  # hasTerm/notHasTerm.Transform: an empty field with an empty value is Everything()
            requirements.append(FieldRequirement(field, "!=" if operator == "!=" else "=", value))
    return FieldSelector(tuple(requirements))


# --- selectable fields per resource -------------------------------------------------------------


def _get(obj: Any, *path: str) -> Any:
    """`obj[path[0]][path[1]]...`, None where a step is missing or not a mapping. On every cached
    event: a decoded object's mappings are dicts, tested by type before the (slower) ABC check."""
    node: Any = obj
    for name in path:
        if type(node) is not dict and not isinstance(node, Mapping):
            return None
        node = node.get(name)
    return node


def _text(value: Any) -> str:
    """A string field as Go holds it: the zero value "" when missing or not a string."""
    return value if isinstance(value, str) else ""


def _bool_text(value: Any) -> str:
    """strconv.FormatBool / fmt.Sprint of a Go bool: missing is false."""
    return "true" if value is True else "false"


def _int_text(value: Any) -> str:
    """strconv.Itoa of a Go int: missing is 0."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "0"


def _pod_fields(pod: Mapping[str, Any]) -> dict[str, str]:
    """pkg/registry/core/pod/strategy.go ToSelectableFields, on the v1 JSON of a pod.

    status.podIP is PodIPs[0] of the internal pod; the v1 -> internal conversion makes a
    non-empty v1 status.podIP authoritative (Convert_v1_PodStatus_To_core_PodStatus).
    """
    spec, status = _get(pod, "spec"), _get(pod, "status")  # each looked up once, not per field
    pod_ip = _text(_get(status, "podIP"))
    pod_ips = _get(status, "podIPs")
    if not pod_ip and isinstance(pod_ips, list) and pod_ips and isinstance(pod_ips[0], Mapping):
        pod_ip = _text(pod_ips[0].get("ip"))
    return {
        "spec.nodeName": _text(_get(spec, "nodeName")),
        "spec.restartPolicy": _text(_get(spec, "restartPolicy")),
        "spec.schedulerName": _text(_get(spec, "schedulerName")),
        "spec.serviceAccountName": _text(_get(spec, "serviceAccountName")),
        "spec.hostNetwork": _bool_text(_get(spec, "hostNetwork")),
        "status.phase": _text(_get(status, "phase")),
        "status.podIP": pod_ip,
        "status.nominatedNodeName": _text(_get(status, "nominatedNodeName")),
    }


def _event_fields(event: Mapping[str, Any]) -> dict[str, str]:
    """pkg/registry/core/event/strategy.go ToSelectableFields (v1 JSON names)."""
    reporting = _text(event.get("reportingComponent"))
    fields = {
        f"involvedObject.{name}": _text(_get(event, "involvedObject", name))
        for name in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    }
    fields.update(
        {
            "reason": _text(event.get("reason")),
            "reportingComponent": reporting,
            "source": _text(_get(event, "source", "component")) or reporting,
            "type": _text(event.get("type")),
        }
    )
    return fields


def _no_fields(_obj: Mapping[str, Any]) -> dict[str, str]:
    return {}


def _field_label_not_supported(label: str) -> str:
    return f"field label not supported: {label}"


def _not_a_known_field_selector(label: str) -> str:
    return f'{_go_quote(label)} is not a known field selector: only "metadata.name", "metadata.namespace"'


def _not_supported_for_job(label: str) -> str:
    return f"field label {_go_quote(label)} not supported for Job"


def _not_supported_for_resource_slice(label: str) -> str:
    return f"field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: {label}"


@dataclass(frozen=True, slots=True)
class _ResourceFields:
    """What kube-apiserver accepts and renders for one built-in resource."""

    fields: frozenset[str]  # labels the field label conversion func accepts (after aliases)
    namespaced: bool  # ToSelectableFields includes metadata.namespace
    extract: Callable[[Mapping[str, Any]], dict[str, str]]  # resource-specific fields
    unsupported: Callable[[str], str] = _field_label_not_supported  # the conversion func's error
    aliases: tuple[tuple[str, str], ...] = ()  # label -> label the conversion func rewrites


_METADATA: Final = frozenset({"metadata.name", "metadata.namespace"})
_INVOLVED_OBJECT_FIELDS: Final = frozenset(
    f"involvedObject.{name}"
    for name in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
)


def _metadata_only(namespaced: bool) -> _ResourceFields:
    """A built-in kind with no conversion func: runtime.DefaultMetaV1FieldSelectorConversion
    accepts metadata.name and metadata.namespace, also for cluster-scoped kinds (where
    metadata.namespace compares as "")."""
    return _ResourceFields(_METADATA, namespaced, _no_fields, _not_a_known_field_selector)


_RESOURCES: Final[dict[tuple[str, str], _ResourceFields]] = {
    ("", "pods"): _ResourceFields(
        # status.podIPs is accepted but absent from the field set, so it compares as "".
        _METADATA
        | {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        },
        True,
        _pod_fields,
        aliases=(("spec.host", "spec.nodeName"),),
    ),
    ("", "nodes"): _ResourceFields(
        frozenset({"metadata.name", "spec.unschedulable"}),
        False,
        lambda node: {"spec.unschedulable": _bool_text(_get(node, "spec", "unschedulable"))},
    ),
    ("", "replicationcontrollers"): _ResourceFields(
        _METADATA | {"status.replicas"},
        True,
        lambda rc: {"status.replicas": _int_text(_get(rc, "status", "replicas"))},
    ),
    ("", "events"): _ResourceFields(
        _METADATA
        | _INVOLVED_OBJECT_FIELDS
        | {"reason", "reportingComponent", "source", "type"},
        True,
        _event_fields,
    ),
    ("", "namespaces"): _ResourceFields(
        frozenset({"metadata.name", "status.phase"}),
        False,
        lambda ns: {"status.phase": _text(_get(ns, "status", "phase"))},
    ),
    ("", "secrets"): _ResourceFields(
        _METADATA | {"type"}, True, lambda secret: {"type": _text(secret.get("type"))}
    ),
    ("", "services"): _ResourceFields(
        _METADATA | {"spec.clusterIP", "spec.type"},
        True,
        lambda svc: {
            "spec.clusterIP": _text(_get(svc, "spec", "clusterIP")),
            "spec.type": _text(_get(svc, "spec", "type")),
        },
    ),
    ("certificates.k8s.io", "certificatesigningrequests"): _ResourceFields(
        frozenset({"metadata.name", "spec.signerName"}),
        False,
        lambda csr: {"spec.signerName": _text(_get(csr, "spec", "signerName"))},
    ),
    ("batch", "jobs"): _ResourceFields(
        _METADATA | {"status.successful"},
        True,
        lambda job: {"status.successful": _int_text(_get(job, "status", "succeeded"))},
        _not_supported_for_job,
    ),
    ("resource.k8s.io", "resourceslices"): _ResourceFields(
        frozenset({"metadata.name", "spec.nodeName", "spec.driver"}),
        False,
        lambda slice_: {
            "spec.nodeName": _text(_get(slice_, "spec", "nodeName")),
            "spec.driver": _text(_get(slice_, "spec", "driver")),
        },
        _not_supported_for_resource_slice,
    ),
    **{
        (group, resource): _metadata_only(namespaced)
        for group, resource, namespaced in (
            ("", "configmaps", True),
            ("", "endpoints", True),
            ("", "limitranges", True),
            ("", "persistentvolumeclaims", True),
            ("", "persistentvolumes", False),
            ("", "podtemplates", True),
            ("", "resourcequotas", True),
            ("", "serviceaccounts", True),
            ("apps", "controllerrevisions", True),
            ("apps", "daemonsets", True),
            ("apps", "deployments", True),
            ("apps", "replicasets", True),
            ("apps", "statefulsets", True),
            ("batch", "cronjobs", True),
            ("coordination.k8s.io", "leases", True),
            ("discovery.k8s.io", "endpointslices", True),
            ("networking.k8s.io", "ingresses", True),
            ("networking.k8s.io", "networkpolicies", True),
            ("node.k8s.io", "runtimeclasses", False),
            ("policy", "poddisruptionbudgets", True),
            ("rbac.authorization.k8s.io", "clusterrolebindings", False),
            ("rbac.authorization.k8s.io", "clusterroles", False),
            ("rbac.authorization.k8s.io", "rolebindings", True),
            ("rbac.authorization.k8s.io", "roles", True),
            ("scheduling.k8s.io", "priorityclasses", False),
            ("storage.k8s.io", "csidrivers", False),
            ("storage.k8s.io", "csinodes", False),
            ("storage.k8s.io", "storageclasses", False),
            ("storage.k8s.io", "volumeattachments", False),
        )
    },
}

# (group, resource) -> field labels kube-apiserver v1.36 accepts in a fieldSelector for it (the
# core group is ""). A selector can be evaluated locally, with `selectable_fields`, when its
# `fields()` are a subset. Resources not listed (CRDs with selectableFields, aggregated APIs,
# events.k8s.io, ...) are unknown here: forward their selectors.
SELECTABLE_FIELDS: Final[dict[tuple[str, str], frozenset[str]]] = {key: spec.fields for key, spec in _RESOURCES.items()}


# (group, resource) -> the one field a watch cache indexes its objects and cache watchers by,
# as kube-apiserver's cacher does with a resource's trigger function (`storage.IndexerFuncs`:
# pods' "spec.nodeName", pkg/registry/core/pod/storage; the cacher's `indexedTrigger`,
# k8s.io/apiserver/pkg/storage/cacher/cacher.go). A kubelet's `spec.nodeName=<node>` pod list
# and watch then read and receive only its node's pods instead of testing every pod.
TRIGGER_FIELDS: Final[dict[tuple[str, str], str]] = {("", "pods"): "spec.nodeName"}


def trigger_value(trigger_field: str, selector: FieldSelector) -> str | None:
    """The value `selector` demands of the cache's trigger field with an `=` term (a kubelet's
    node name; "" for `spec.nodeName=`), None when it has none or there is no trigger field:
    such a selector is answered by testing every object."""
    return selector.requires_exact_match(trigger_field) if trigger_field else None


def is_namespaced(group: str, resource: str) -> bool | None:
    """Whether a known (group, resource) is namespaced; None when it is not known here."""
    spec = _RESOURCES.get((group, resource))
    return None if spec is None else spec.namespaced


def selectable_fields(group: str, resource: str, obj: Mapping[str, Any]) -> dict[str, str]:
    """The field set kube-apiserver matches a field selector against (GetAttrs), for one
    decoded v1 object of (group, resource).

    Values are rendered as the apiserver renders them: strings as is ("" when missing), bools
    "true"/"false" (missing is "false"), counts in decimal (missing is "0"). metadata.namespace
    is present only for namespaced resources. An unknown resource gets metadata.name, and
    metadata.namespace when the object has one.
    """
    meta = obj.get("metadata")  # on every cached event: the metadata is read once, not walked per field
    if type(meta) is dict or isinstance(meta, Mapping):  # (a decoded object's is a dict: no ABC check)
        name, namespace = _text(meta.get("name")), _text(meta.get("namespace"))
    else:
        name = namespace = ""
    spec = _RESOURCES.get((group, resource))
    if spec is None:
        return {"metadata.name": name, "metadata.namespace": namespace} if namespace else {"metadata.name": name}
    if spec.extract is _no_fields:
        return {"metadata.name": name, "metadata.namespace": namespace} if spec.namespaced else {"metadata.name": name}
    fields = {"metadata.name": name}
    if spec.namespaced:
        fields["metadata.namespace"] = namespace
    fields.update(spec.extract(obj))
    return fields


def normalise_field_selector(group: str, resource: str, selector: FieldSelector) -> FieldSelector:
    """Apply kube-apiserver's field label conversion (Scheme.ConvertFieldLabel) for a known
    resource: rename aliases (`spec.host` -> `spec.nodeName` for pods) and reject labels the
    resource does not support, with the conversion func's message (SelectorError("field label
    not supported: spec.foo") for pods and nodes). Unknown resources are returned unchanged;
    their apiserver decides.
    """
    spec = _RESOURCES.get((group, resource))
    if spec is None:
        return selector
    aliases = dict(spec.aliases)
    converted = []
    # Transform visits terms in the order of their text, which render() reproduces.
    for requirement in sorted(selector.requirements, key=FieldRequirement.render):
        field = aliases.get(requirement.field, requirement.field)
        if field not in spec.fields:
            raise SelectorError(spec.unsupported(requirement.field))
        converted.append(FieldRequirement(field, requirement.operator, requirement.value))
    return FieldSelector(tuple(converted))



def reads_only_metadata(group: str, resource: str) -> bool:
    """Whether the field set of a known (group, resource) is metadata.name and
    metadata.namespace only (no conversion func reads the object beyond its metadata)."""
    spec = _RESOURCES.get((group, resource))
    return spec is not None and spec.extract is _no_fields
