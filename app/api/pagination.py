"""Keyset pagination shared by every list endpoint: opaque cursors, page limits, the Link header.

A page is ordered newest first by (instant, id); the cursor names the last row served, and the
next page is what sorts strictly after it. Clients treat cursors as opaque: they are base64url of
a small JSON array, so a malformed one is refused as input rather than guessed at.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, TypeVar
from urllib.parse import urlencode
from uuid import UUID

from litestar.params import QueryParameter

from app import errors

PAGE_MAX = 500
# ?limit= of a list route: its bounds are documented here and checked by page_limit (whose refusal the
# API words itself; Litestar's own check would word it differently).
PageLimit = Annotated[int | None, QueryParameter(schema_extra={"minimum": 1, "maximum": PAGE_MAX})]
PAGE_DEFAULT = 50

Row = TypeVar("Row")


def encode_cursor(at: datetime, ident: UUID) -> str:
    raw = json.dumps([at.isoformat(), str(ident)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[datetime, UUID] | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, ident = json.loads(raw)
        instant = datetime.fromisoformat(at)
        if instant.utcoffset() is None:  # every cursor this API issues carries its offset
            raise ValueError(at)
        return instant, UUID(ident)
    except (ValueError, TypeError, OverflowError):
        raise errors.InvalidParameter("cursor", "is not a cursor this API issued") from None


def page_limit(limit: int | None, default: int = PAGE_DEFAULT) -> int:
    value = default if limit is None else limit
    if not 1 <= value <= PAGE_MAX:
        raise errors.InvalidParameter("limit", f"must be between 1 and {PAGE_MAX}")
    return value


def split_page(
    rows: Sequence[Row],
    limit: int,
    key: Callable[[Row], tuple[datetime, UUID]],
) -> tuple[list[Row], str | None]:
    """The page of ``limit`` rows out of ``limit + 1`` fetched, and the cursor of the next (None: last page)."""
    page = list(rows[:limit])
    return page, encode_cursor(*key(page[-1])) if len(rows) > limit else None


def next_link(path: str, cursor: str, **params: object) -> str:
    """RFC 8288 Link header value for the next page."""
    query = {k: v for k, v in params.items() if v is not None}
    query["cursor"] = cursor
    return f'<{path}?{urlencode(query, doseq=True)}>; rel="next"'
