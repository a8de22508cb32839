"""Compact JSON text, as Kairos stores and sends it: ``json.dumps(value, separators=(",", ":"))``.

One encoder for the process: ``json.dumps`` with any non-default argument builds a new encoder per
call, which was a visible share of a submit batch (every job's payload, labels and headers).
"""

from __future__ import annotations

import json
from typing import Any

_ENCODER = json.JSONEncoder(separators=(",", ":"))


def compact_json(value: Any) -> str:
    if type(value) is dict and not value:
        return "{}"
    return _ENCODER.encode(value)
