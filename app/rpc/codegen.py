"""Regenerate the gRPC modules from ``app/rpc/worker.proto`` (``make proto``).

``python -m app.rpc.codegen`` writes ``worker_pb2.py``, ``worker_pb2.pyi`` and
``worker_pb2_grpc.py`` next to the proto; ``--out DIR`` writes them under DIR/app/rpc instead
(the staleness test compares such a fresh copy with the committed modules).
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO = "app/rpc/worker.proto"
GENERATED = ("worker_pb2.py", "worker_pb2.pyi", "worker_pb2_grpc.py")


def generate(out: Path = ROOT) -> list[Path]:
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    (out / "app" / "rpc").mkdir(parents=True, exist_ok=True)
    well_known = str(resources.files("grpc_tools") / "_proto")
    # Proto path relative to the repository root, so the generated stub imports
    # ``from app.rpc import worker_pb2`` rather than a top-level ``worker_pb2``.
    code = protoc.main([
        "grpc_tools.protoc", f"-I{ROOT}", f"-I{well_known}",
        f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", PROTO,
    ])
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    return [out / "app" / "rpc" / name for name in GENERATED]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT, help="root to write app/rpc/*_pb2*.py under")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
