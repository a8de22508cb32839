"""?label= takes Kubernetes-style selectors besides key:value."""

from __future__ import annotations

import pytest

from app.domain.jobs import LabelSelector, parse_label_selectors
from app.errors import InvalidInput


@pytest.mark.parametrize(
    ("text", "equal", "selectors"),
    [
        ("team:payments", {"team": "payments"}, []),
        ("team=payments", {"team": "payments"}, []),
        ("team==payments", {"team": "payments"}, []),
        ("env!=prod", {}, [LabelSelector("env", "notin", ("prod",))]),
        ("team in (a, b)", {}, [LabelSelector("team", "in", ("a", "b"))]),
        ("team notin (a,b)", {}, [LabelSelector("team", "notin", ("a", "b"))]),
        ("!env", {}, [LabelSelector("env", "absent", ())]),
        ("env", {}, [LabelSelector("env", "exists", ())]),
        (
            "team in (a,b),!env,tier=gold",
            {"tier": "gold"},
            [LabelSelector("team", "in", ("a", "b")), LabelSelector("env", "absent", ())],
        ),
    ],
)
def test_selectors_parse(text: str, equal: dict, selectors: list) -> None:
    assert parse_label_selectors([text]) == (equal, selectors)


@pytest.mark.parametrize("text", ["", "Team=x", "team in a,b", "team in ()", "!", "team in (a", "a=b=c)"])
def test_bad_selectors_name_the_parameter(text: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_label_selectors([text])
    assert refused.value.field == "label"
