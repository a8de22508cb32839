"""The Kairos-Signature header: what the server signs, a tenant's endpoint verifies."""

from __future__ import annotations

from kairos_sdk import verify_signature
from kairos_sdk.signature import sign


def test_a_signed_body_verifies_and_a_changed_body_or_secret_does_not() -> None:
    header = sign("s3cret", b'{"a":1}', t=1_000)
    assert header.startswith("t=1000,v1=")
    assert verify_signature("s3cret", header, b'{"a":1}', now=1_000)
    assert not verify_signature("s3cret", header, b'{"a":2}', now=1_000)
    assert not verify_signature("other", header, b'{"a":1}', now=1_000)


def test_stale_or_malformed_headers_are_refused() -> None:
    header = sign("s", b"x", t=1_000)
    assert verify_signature("s", header, b"x", now=1_299)
    assert not verify_signature("s", header, b"x", now=1_301)
    assert not verify_signature("s", header, b"x", now=1_010, tolerance_s=5)
    for bad in ("", "v1=abc", "t=soon,v1=abc", "t=1000"):
        assert not verify_signature("s", bad, b"x", now=1_000)


def test_any_of_several_v1_values_may_match() -> None:
    good = sign("s", b"x", t=1_000).split("v1=")[1]
    assert verify_signature("s", f"t=1000,v1={'0' * 64},v1={good}", b"x", now=1_000)


def test_a_rotation_header_carries_one_v1_per_secret_and_either_verifies() -> None:
    header = sign(["new", "old"], b"x", t=1_000)
    assert header.count("v1=") == 2 and header.startswith("t=1000,v1=")
    assert header.split(",")[1] == sign("new", b"x", t=1_000).split(",")[1]  # the current secret's comes first
    for secret in ("new", "old", ["old", "other"], ["other", "new"]):
        assert verify_signature(secret, header, b"x", now=1_000)
    assert not verify_signature("other", header, b"x", now=1_000)
    assert not verify_signature([], header, b"x", now=1_000)
