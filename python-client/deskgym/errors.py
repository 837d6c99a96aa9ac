"""The one exception type of the client."""

from __future__ import annotations

import re

import grpc

_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}

#: A server message for bad input starts with the dotted field path: "action.click.target: ...".
_FIELD = re.compile(r"^([a-z_][a-z0-9_]*(?:\[\d+\])?(?:\.[a-z_][a-z0-9_]*(?:\[\d+\])?)*): ")


def code_name(code: int) -> str:
    """gRPC status code number -> name, e.g. 3 -> "INVALID_ARGUMENT"."""
    return _CODE_NAMES.get(code, f"CODE_{code}")


def field_of(code: str, message: str) -> str | None:
    """The offending field of an INVALID_ARGUMENT message ("action.key.keys"), else None."""
    if code != "INVALID_ARGUMENT":
        return None
    m = _FIELD.match(message)
    return m.group(1) if m else None


class DeskgymError(Exception):
    """A failed deskgym call.

    Attributes:
        code: the gRPC status code name, e.g. ``"INVALID_ARGUMENT"``, ``"NOT_FOUND"``.
        message: the server's message; for bad input it starts with the field name.
        field: for ``INVALID_ARGUMENT``, the dotted path of the offending field
            (``"action.click.target.point_px"``), else ``None``.

    Instances pickle with all three (``__reduce__``), so the real error crosses a Ray
    actor, a ``multiprocessing`` worker or a Gymnasium ``AsyncVectorEnv`` worker intact.
    """

    def __init__(self, code: str | DeskgymError, message: str = "", field: str | None = None) -> None:
        if isinstance(code, DeskgymError):
            # Gymnasium's AsyncVectorEnv re-raises a worker's error as `type(e)(e)`.
            src = code
            code, message, field = src.code, src.message, src.field
        super().__init__(f"{code}: {message}")
        self.code: str = code
        self.message: str = message
        self.field: str | None = field if field is not None else field_of(code, message)

    def __reduce__(self) -> tuple[type[DeskgymError], tuple[str, str, str | None]]:
        return (type(self), (self.code, self.message, self.field))

    @classmethod
    def from_rpc(cls, err: grpc.RpcError) -> DeskgymError:
        code = err.code() if hasattr(err, "code") else None
        details = err.details() if hasattr(err, "details") else str(err)
        return cls(code.name if code is not None else "UNKNOWN", details or "")
