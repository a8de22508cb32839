"""The ``Kairos-Signature`` header of HTTP deliveries: ``t=<unix seconds>,v1=<hex HMAC-SHA256>``.

The MAC covers ``"<t>.<body>"`` with the tenant's signing secret, so a receiver can check both
origin and freshness (reject a ``t`` too far from its clock to stop replays). The server signs
with ``sign``; a tenant's endpoint checks with ``verify``::

    from kairos_sdk import verify_signature

    if not verify_signature(secret, request.headers["Kairos-Signature"], raw_body):
        return 401
"""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = "Kairos-Signature"


def sign(secret: str, body: bytes, t: int | None = None) -> str:
    """The header value signing ``body`` at ``t`` (default now)."""
    t = int(time.time()) if t is None else t
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(secret: str, header: str, body: bytes, *, tolerance_s: float = 300,
           now: float | None = None) -> bool:
    """True when ``header`` signs ``body`` with ``secret`` and its time is within tolerance."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        fields.setdefault(key, []).append(value)
    try:
        t = int(fields["t"][0])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        return False
    expected = sign(secret, body, t).split("v1=", 1)[1]
    return any(hmac.compare_digest(expected, v) for v in fields.get("v1", []))
