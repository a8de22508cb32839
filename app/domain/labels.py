"""Labels on jobs and the selectors that filter by them (``?label=``, as Kubernetes label selectors)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.errors import InvalidInput, refuse_nul

MAX_LABELS = 32
LABEL_KEY = re.compile(r"^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$")
MAX_LABEL_VALUE_LEN = 128


def validate_labels(labels: dict[str, str] | None) -> dict[str, str]:
    """Kubernetes-style keys (lower case, digits, . _ / -), string values; filterable with ?label=k:v."""
    if not labels:
        return {}
    if len(labels) > MAX_LABELS:
        raise InvalidInput("labels", f"at most {MAX_LABELS} labels")
    for key, value in labels.items():
        if not LABEL_KEY.match(key):
            raise InvalidInput(
                f"labels.{key}", "a label key is 1-63 of a-z 0-9 . _ / - starting and ending with a letter or digit"
            )
        if not isinstance(value, str) or len(value) > MAX_LABEL_VALUE_LEN:
            raise InvalidInput(
                f"labels.{key}", f"a label value is a string of at most {MAX_LABEL_VALUE_LEN} characters"
            )
        refuse_nul(value, f"labels.{key}")
    return dict(labels)


@dataclass(frozen=True)
class LabelSelector:
    """One set-based requirement of a ?label= selector (Kubernetes' grammar): ``in`` and ``notin`` a set of
    values (``notin`` also matches a job without the key, as ``!=`` does), ``exists`` and ``absent``."""

    key: str
    op: Literal["in", "notin", "exists", "absent"]
    values: tuple[str, ...] = ()


_SET_REQUIREMENT = re.compile(r"^(?P<key>[^\s!=:()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_LABEL_SELECTOR_HELP = (
    "a label selector is key:value, key=value, key!=value, 'key in (a,b)', 'key notin (a,b)', "
    "key (has it) or !key (has not), several joined by commas"
)


def _requirements(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise InvalidInput("label", _LABEL_SELECTOR_HELP)
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if depth:
        raise InvalidInput("label", _LABEL_SELECTOR_HELP)
    return [*parts, current]


def _label_key(key: str) -> str:
    if not LABEL_KEY.match(key):
        raise InvalidInput("label", f"{key!r} is not a label key; " + _LABEL_SELECTOR_HELP)
    return key


def parse_label_selectors(values: Sequence[str]) -> tuple[dict[str, str], list[LabelSelector]]:
    """Each ?label= value (repeat to require all): the equalities (``key:value``, ``key=value``) and the
    set-based requirements; InvalidInput("label", ...) for one that does not parse."""
    equal: dict[str, str] = {}
    selectors: list[LabelSelector] = []
    for value in values:
        for raw in _requirements(value):
            text = raw.strip()
            if not text:
                raise InvalidInput("label", _LABEL_SELECTOR_HELP)
            if found := _SET_REQUIREMENT.match(text):
                wanted = tuple(v.strip() for v in found["values"].split(","))
                if not all(wanted):
                    raise InvalidInput("label", _LABEL_SELECTOR_HELP)
                selectors.append(LabelSelector(_label_key(found["key"]), found["op"], wanted))  # type: ignore[arg-type]
            elif "!=" in text:
                key, _, wanted_one = text.partition("!=")
                selectors.append(LabelSelector(_label_key(key.strip()), "notin", (wanted_one.strip(),)))
            elif "=" in text or ":" in text:
                sep = "==" if "==" in text else "=" if "=" in text else ":"
                key, _, wanted_one = text.partition(sep)
                if any(ch in wanted_one for ch in "=()"):
                    raise InvalidInput("label", _LABEL_SELECTOR_HELP)
                equal[_label_key(key.strip())] = wanted_one.strip() if sep != ":" else wanted_one
            elif text.startswith("!"):
                selectors.append(LabelSelector(_label_key(text[1:].strip()), "absent"))
            else:
                selectors.append(LabelSelector(_label_key(text), "exists"))
    return equal, selectors
