"""The README's examples run as pasted, in order, against `kairos up --demo` (what `make run` starts).

Every ```sh block after the first (which is `make run` itself) is run in one bash session from the
repository's root, as a reader pasting them one after the other would; `curl` fails on an error
answer (4xx/5xx), so an example that the API refuses fails the test. The stack's addresses come
from the variables the README reads with defaults (KAIROS_API_URL, KAIROS_HOME, KAIROS_GRPC_ADDR).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import kairos_up

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PRELUDE = """set -euo pipefail
curl() { command curl --fail-with-body --max-time 20 "$@"; }
"""


def readme_blocks() -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.MULTILINE | re.DOTALL)
    assert blocks and "make run" in blocks[0], "the first block is make run"
    return blocks[1:]


def test_the_readme_examples_run_as_pasted_against_a_started_stack(tmp_path: Path) -> None:
    script = PRELUDE + "\n".join(f"echo '--- block {i}' >&2\n{block}" for i, block in enumerate(readme_blocks()))
    with kairos_up(tmp_path, "--demo") as up:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")},
            "KAIROS_HOME": str(up.home),
            "KAIROS_API_URL": up.api,
            "KAIROS_GRPC_ADDR": up.grpc_addr,
        }
        done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, (
        f"exit {done.returncode}\n--- stderr\n{done.stderr[-4000:]}\n--- stdout\n{done.stdout[-3000:]}"
    )
