"""Regenerate the committed gRPC stubs from server/agentix.proto (needs grpcio-tools).

    python -m server.gen_stubs          # rewrite server/agentix_pb2*.py
    python -m server.gen_stubs --check  # exit 1 if the committed stubs are out of date

The stubs are committed so that running the server needs only grpcio and protobuf; a test
runs the check so they cannot drift from the .proto.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUBS = ("agentix_pb2.py", "agentix_pb2_grpc.py", "agentix_pb2.pyi")


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc

    args = ["protoc", f"-I{ROOT}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}", str(ROOT / "server" / "agentix.proto")]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed on server/agentix.proto")


def stale_stubs() -> list[str]:
    """Names of committed stub files that differ from freshly generated ones."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [name for name in STUBS
                if (Path(tmp) / "server" / name).read_text()
                != (ROOT / "server" / name).read_text()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_stubs()
        if stale:
            print(f"out of date: {stale}; run python -m server.gen_stubs")
            sys.exit(1)
        return
    generate(ROOT)


if __name__ == "__main__":
    main()
