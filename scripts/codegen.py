"""Regenerate the SDK's gRPC modules from ``app/rpc/worker.proto`` (``make proto``).

A development tool (it needs grpcio-tools, a dev extra), so it lives outside the shipped ``app``.
``python -m scripts.codegen`` writes ``worker_pb2.py``, ``worker_pb2.pyi`` and
``worker_pb2_grpc.py`` into ``sdk/python/kairos_sdk/_proto/``; ``--out DIR`` writes them under
DIR/kairos_sdk/_proto instead (the staleness test compares such a fresh copy with the committed
modules). The generator is pinned: its version decides the grpcio and protobuf floors that the
generated code checks at import, and those floors are what both pyprojects promise.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata, resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SDK = ROOT / "sdk" / "python"
PROTO = ROOT / "app" / "rpc" / "worker.proto"
PACKAGE = "kairos_sdk/_proto"
GENERATED = ("worker_pb2.py", "worker_pb2.pyi", "worker_pb2_grpc.py")
# Generates code that needs grpcio>=1.85.1 and protobuf>=7.35.1,<8 (see sdk/python/pyproject.toml).
GRPCIO_TOOLS_VERSION = "1.85.1"


def generate(out: Path = SDK) -> list[Path]:
    found = metadata.version("grpcio-tools")
    if found != GRPCIO_TOOLS_VERSION:
        raise RuntimeError(
            f"grpcio-tools {GRPCIO_TOOLS_VERSION} expected, {found} installed "
            "(a different generator changes the runtime floors the SDK promises)"
        )
    from grpc_tools import protoc

    (out / PACKAGE).mkdir(parents=True, exist_ok=True)
    well_known = str(resources.files("grpc_tools") / "_proto")
    # The proto is mapped to kairos_sdk/_proto/ so the generated stub imports
    # ``from kairos_sdk._proto import worker_pb2`` rather than a top-level ``worker_pb2``.
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PACKAGE}={PROTO.parent}",
            f"-I{well_known}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            f"{PACKAGE}/{PROTO.name}",
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    return [out / PACKAGE / name for name in GENERATED]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SDK, help=f"root to write {PACKAGE}/*_pb2*.py under")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
