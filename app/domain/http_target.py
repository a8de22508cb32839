"""An HTTP target's request shape: its method, its headers and its auth, as a job may set them. Pure."""

from __future__ import annotations

import re
from typing import Literal

from app.errors import InvalidInput

HttpMethod = Literal["POST", "PUT", "PATCH", "GET"]
HTTP_METHODS: tuple[HttpMethod, ...] = ("POST", "PUT", "PATCH", "GET")
MAX_HEADERS = 32
MAX_HEADER_VALUE_LEN = 4096
# RFC 9110 5.1: a field name is a token (tchar); ASCII only.
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}", re.ASCII)
# RFC 9110 5.5 field-value: visible ASCII (VCHAR), with spaces and tabs only between visible characters.
# obs-text (bytes 0x80-0xFF) is left out: clients and servers disagree on how to encode it, and a
# value must reach the receiver as the tenant wrote it. CTLs (0x00-0x1F but HTAB, and DEL) are refused.
HEADER_VALUE = re.compile(r"(?:[\x21-\x7e](?:[\x20\x09\x21-\x7e]*[\x21-\x7e])?)?", re.ASCII)
# Set by the HTTP delivery itself (content, signature, idempotency); a job cannot override them.
RESERVED_HEADERS = frozenset(
    {"content-type", "content-length", "host", "transfer-encoding", "connection", "idempotency-key", "traceparent"}
)
RESERVED_HEADER_PREFIX = "kairos-"


def validate_http(kind: str, method: str | None, headers: dict[str, str] | None) -> tuple[HttpMethod, dict[str, str]]:
    """The method and headers of a target of ``kind`` (a Target's type): both only for an http one."""
    if kind != "http":
        if method is not None or headers:
            raise InvalidInput("target", "method and headers apply to http targets only")
        return "POST", {}
    chosen = (method or "POST").upper()
    if chosen not in HTTP_METHODS:
        raise InvalidInput("target.method", f"must be one of {', '.join(HTTP_METHODS)}")
    out: dict[str, str] = {}
    for name, value in (headers or {}).items():
        where = _header_pointer(name)
        if not HEADER_NAME.fullmatch(name):
            raise InvalidInput(
                where, "is not a valid HTTP header name (RFC 9110 token: 1-128 of A-Z a-z 0-9 !#$%&'*+.^_`|~-)"
            )
        lowered = name.lower()
        if lowered in RESERVED_HEADERS or lowered.startswith(RESERVED_HEADER_PREFIX):
            raise InvalidInput(where, "is set by Kairos itself and cannot be overridden")
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE_LEN:
            raise InvalidInput(where, f"a header value is a string of at most {MAX_HEADER_VALUE_LEN} characters")
        if not HEADER_VALUE.fullmatch(value):
            raise InvalidInput(
                where,
                "a header value is visible ASCII characters, with spaces or tabs only between "
                "them (RFC 9110 field-value; no control or non-ASCII characters)",
            )
        out[name] = value
    if len(out) > MAX_HEADERS:
        raise InvalidInput("target.headers", f"at most {MAX_HEADERS} headers")
    return chosen, out


AUTH_TYPES = ("oidc",)
MAX_AUDIENCE_LEN = 2048
# An audience is a string or URI (RFC 7519 4.1.3): visible ASCII, no spaces.
AUDIENCE = re.compile(rf"[\x21-\x7e]{{1,{MAX_AUDIENCE_LEN}}}", re.ASCII)


def validate_auth(
    kind: str, auth_type: str | None, audience: str | None, headers: dict[str, str]
) -> dict[str, str] | None:
    """An HTTP target's auth object as stored ({"type": "oidc"} and the audience when given; without one the
    token's ``aud`` is the target's URL, as Cloud Scheduler does); None without auth."""
    if auth_type is None:
        if audience is not None:
            raise InvalidInput("target.auth.type", "is required")
        return None
    if kind != "http":
        raise InvalidInput("target.auth", "applies to http targets only")
    if auth_type not in AUTH_TYPES:
        raise InvalidInput("target.auth.type", f"must be one of {', '.join(AUTH_TYPES)}")
    for name in headers:
        if name.lower() == "authorization":
            raise InvalidInput(
                _header_pointer(name), "cannot be set with target.auth: the identity token is the Authorization header"
            )
    if audience is None:
        return {"type": auth_type}
    if not isinstance(audience, str) or not AUDIENCE.fullmatch(audience):
        raise InvalidInput(
            "target.auth.audience",
            f"an audience is 1-{MAX_AUDIENCE_LEN} visible ASCII characters "
            "without spaces (a URL or another string the receiver expects)",
        )
    return {"type": auth_type, "audience": audience}


def _header_pointer(name: str) -> str:
    """The JSON Pointer of a header in the body (RFC 6901: ~ and / escaped), so a name holding a dot
    is named as it is."""
    return "/target/headers/" + name.replace("~", "~0").replace("/", "~1")
