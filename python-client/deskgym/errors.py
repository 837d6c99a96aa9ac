"""The one exception type of the client."""

from __future__ import annotations

import grpc

_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


def code_name(code: int) -> str:
    """gRPC status code number -> name, e.g. 3 -> "INVALID_ARGUMENT"."""
    return _CODE_NAMES.get(code, f"CODE_{code}")


class DeskgymError(Exception):
    """A failed deskgym call.

    Attributes:
        code: the gRPC status code name, e.g. ``"INVALID_ARGUMENT"``, ``"NOT_FOUND"``.
        message: the server's message; for bad input it starts with the field name.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc(cls, err: grpc.RpcError) -> DeskgymError:
        code = err.code() if hasattr(err, "code") else None
        details = err.details() if hasattr(err, "details") else str(err)
        return cls(code.name if code is not None else "UNKNOWN", details or "")
