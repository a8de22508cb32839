"""A command's bad input: one line on stderr and exit code 2. Imports nothing of ours, so every command
module can use it without loading the tiers."""

from __future__ import annotations

import sys
from typing import NoReturn


def fail(message: str) -> NoReturn:
    """A command's bad input: one line on stderr, exit code 2."""
    sys.stderr.write(f"error: {message}\n")
    sys.exit(2)
