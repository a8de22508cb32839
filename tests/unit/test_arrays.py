"""Array literals: the fast paths write exactly what the general rendering writes."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.store.arrays import plain, texts


def reference_plain(values: list[Any]) -> str:
    return (
        "{"
        + ",".join("NULL" if v is None else v.isoformat() if isinstance(v, datetime) else str(v) for v in values)
        + "}"
    )


def reference_texts(values: list[str | None]) -> str:
    return (
        "{"
        + ",".join("NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
        + "}"
    )


instants = st.datetimes(timezones=st.just(timezone.utc))
scalars = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.uuids(), instants)


@given(
    st.one_of(
        st.lists(st.integers()), st.lists(st.uuids()), st.lists(instants), st.lists(st.one_of(st.none(), scalars))
    )
)
def test_plain_matches_the_general_rendering(values: list[Any]) -> None:
    assert plain(values) == reference_plain(values)
    assert plain(iter(values)) == reference_plain(values)


@given(st.lists(st.one_of(st.none(), st.text(alphabet=st.sampled_from('ab,"\\{} \n')))))
def test_texts_matches_the_general_rendering(values: list[str | None]) -> None:
    assert texts(values) == reference_texts(values)
    assert texts(v for v in values) == reference_texts(values)


def test_the_common_columns() -> None:
    ids = [uuid.UUID(int=1), uuid.UUID(int=2)]
    at = datetime(2026, 12, 4, tzinfo=timezone.utc)
    assert plain(ids) == "{00000000-0000-0000-0000-000000000001,00000000-0000-0000-0000-000000000002}"
    assert plain([at, at + timedelta(seconds=1)]) == "{2026-12-04T00:00:00+00:00,2026-12-04T00:00:01+00:00}"
    assert plain([at, at, at]) == "{" + ",".join([at.isoformat()] * 3) + "}"  # a herd's shared instant
    assert plain([None, None]) == "{NULL,NULL}" and plain([True, False]) == "{True,False}"
    assert plain([1, None]) == "{1,NULL}" and plain([]) == "{}" and texts([]) == "{}"
    assert texts([None, None]) == "{NULL,NULL}" and texts(["queue", "queue"]) == '{"queue","queue"}'
    assert texts(['a","b', None]) == '{"a\\",\\"b",NULL}'
