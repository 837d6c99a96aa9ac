"""Generates the gRPC stubs from ../proto before every build (as dm_env_rpc does).

The generated modules (deskgym/v1/deskgym_pb2*.py, .pyi) are never edited by hand and
never committed, so they cannot drift from the protos.
"""

from __future__ import annotations

import importlib.resources
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).parent.resolve()
PROTO_ROOT = (HERE / ".." / "proto").resolve()
OUT = HERE / "deskgym" / "v1"


def generate() -> None:
    protos = sorted(PROTO_ROOT.glob("deskgym/v1/*.proto"))
    if not protos:
        if (OUT / "deskgym_pb2.py").exists():
            return  # building from an sdist that already carries the stubs
        raise RuntimeError(f"no .proto files under {PROTO_ROOT}; build from the deskgym repository")
    from grpc_tools import protoc

    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={HERE}",
        f"--pyi_out={HERE}",
        f"--grpc_python_out={HERE}",
        *[str(p) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("grpc_tools.protoc failed on " + ", ".join(map(str, protos)))


class BuildPy(build_py):
    def run(self) -> None:
        generate()
        super().run()


setup(cmdclass={"build_py": BuildPy})
