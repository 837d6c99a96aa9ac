"""The one exception type of the client."""

from __future__ import annotations

import re

import grpc

_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}

#: Item errors that mean "this desktop broke", not "your request was wrong": a vector
#: env reports the env truncated with ``info["error"]`` and resets it like any ended episode.
ENV_FAULTS = {"UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED", "UNKNOWN"}

#: Whole-call failures that mean "this server is gone", not "the request was wrong"
#: (NOT_FOUND: a restarted server no longer knows the pools).
SERVER_FAULTS = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "UNKNOWN", "CANCELLED", "NOT_FOUND"}

#: A server message for bad input starts with the dotted field path: "action.click.target: ...".
_FIELD = re.compile(r"^([a-z_][a-z0-9_]*(?:\[\d+\])?(?:\.[a-z_][a-z0-9_]*(?:\[\d+\])?)*): ")


def code_name(code: int) -> str:
    """gRPC status code number -> name, e.g. 3 -> "INVALID_ARGUMENT"."""
    return _CODE_NAMES.get(code, f"CODE_{code}")


def _fields(buf: bytes) -> list[tuple[int, int, bytes | int]]:
    """The top-level (field number, wire type, value) of a protobuf message (varint and
    length-delimited fields only: all that google.rpc.Status/Any/BadRequest use)."""
    out: list[tuple[int, int, bytes | int]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        v, shift = 0, 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while i < len(buf):
        key = varint()
        num, wt = key >> 3, key & 7
        if wt == 0:
            out.append((num, wt, varint()))
        elif wt == 2:
            n = varint()
            out.append((num, wt, buf[i:i + n]))
            i += n
        else:
            raise ValueError(f"wire type {wt}")
    return out


def field_from_details(details: bytes) -> str | None:
    """The first ``google.rpc.BadRequest`` field violation in a ``grpc-status-details-bin``
    trailer (a serialized ``google.rpc.Status``), decoded without extra dependencies."""
    try:
        for num, _, any_msg in _fields(details):
            if num != 3 or not isinstance(any_msg, bytes):
                continue
            parts = {n: v for n, _, v in _fields(any_msg)}
            if parts.get(1) != b"type.googleapis.com/google.rpc.BadRequest" or not isinstance(parts.get(2), bytes):
                continue
            for vnum, _, violation in _fields(parts[2]):  # type: ignore[arg-type]
                if vnum == 1 and isinstance(violation, bytes):
                    f = {n: v for n, _, v in _fields(violation)}.get(1)
                    if isinstance(f, bytes):
                        return f.decode()
    except (IndexError, ValueError, UnicodeDecodeError):
        return None
    return None


_REASON = re.compile(
    r"^(stale_element_ref|element_not_found|ambiguous_element|element_unsupported|accessibility_unavailable): "
)


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

    @property
    def reason(self) -> str | None:
        """For an element target or verb that failed, the machine-readable reason the
        message starts with: ``"stale_element_ref"`` (observe again, use a current
        ref), ``"element_not_found"``, ``"ambiguous_element"``, ``"element_unsupported"``,
        ``"accessibility_unavailable"``; else ``None``."""
        m = _REASON.match(self.message) if self.code == "FAILED_PRECONDITION" else None
        return m.group(1) if m else None

    def __reduce__(self) -> tuple[type[DeskgymError], tuple[str, str, str | None]]:
        return (type(self), (self.code, self.message, self.field))

    @classmethod
    def from_rpc(cls, err: grpc.RpcError) -> DeskgymError:
        code = err.code() if hasattr(err, "code") else None
        details = err.details() if hasattr(err, "details") else str(err)
        field = None
        trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
        for item in trailers or ():
            key, value = item.key, item.value
            if key == "grpc-status-details-bin" and isinstance(value, bytes):
                field = field_from_details(value)
        return cls(code.name if code is not None else "UNKNOWN", details or "", field)
