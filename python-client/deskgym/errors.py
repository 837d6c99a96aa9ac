"""The one exception type of the client."""

from __future__ import annotations

import re

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

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


def details_of(err: grpc.RpcError) -> tuple[str | None, str | None]:
    """The ``google.rpc.BadRequest`` field and the ``google.rpc.ErrorInfo`` reason a
    status carries in its details (the richer error model the server answers with), or
    ``None`` for each it does not carry."""
    field = reason = None
    try:
        status = rpc_status.from_call(err)  # type: ignore[arg-type]
    except (ValueError, AttributeError):
        return None, None
    for d in status.details if status is not None else ():
        if d.Is(error_details_pb2.BadRequest.DESCRIPTOR) and field is None:
            bad = error_details_pb2.BadRequest()
            d.Unpack(bad)
            field = bad.field_violations[0].field if bad.field_violations else None
        elif d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) and reason is None:
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            reason = info.reason or None
    return field, reason


#: The reasons an element failure's message starts with ("stale_element_ref: ...").
_REASON = re.compile(
    r"^(stale_element_ref|element_not_found|ambiguous_element|element_unsupported|accessibility_unavailable): "
)


def reason_of(code: str, message: str) -> str | None:
    """An element failure's reason from its message, for errors that travel as a code and
    a message only (a StepBatch item's): the message leads with it, as the ACI spec has it."""
    m = _REASON.match(message) if code == "FAILED_PRECONDITION" else None
    return m.group(1) if m else None


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

    Instances pickle with all four (``__reduce__``), so the real error crosses a Ray
    actor, a ``multiprocessing`` worker or a Gymnasium ``AsyncVectorEnv`` worker intact.
    """

    def __init__(
        self, code: str | DeskgymError, message: str = "", field: str | None = None, reason: str | None = None
    ) -> None:
        if isinstance(code, DeskgymError):
            # Gymnasium's AsyncVectorEnv re-raises a worker's error as `type(e)(e)`.
            src = code
            code, message, field, reason = src.code, src.message, src.field, src.reason
        super().__init__(f"{code}: {message}")
        self.code: str = code
        self.message: str = message
        self.field: str | None = field if field is not None else field_of(code, message)
        #: For an element target or verb that failed, the machine-readable reason (the
        #: status's ``google.rpc.ErrorInfo``): ``"stale_element_ref"`` (observe again, use
        #: a current ref), ``"element_not_found"``, ``"ambiguous_element"``,
        #: ``"element_unsupported"``, ``"accessibility_unavailable"``; else ``None``.
        self.reason: str | None = reason if reason is not None else reason_of(code, message)

    def __reduce__(self) -> tuple[type[DeskgymError], tuple[str, str, str | None, str | None]]:
        return (type(self), (self.code, self.message, self.field, self.reason))

    @classmethod
    def from_rpc(cls, err: grpc.RpcError) -> DeskgymError:
        code = err.code() if hasattr(err, "code") else None
        details = err.details() if hasattr(err, "details") else str(err)
        field, reason = details_of(err)
        return cls(code.name if code is not None else "UNKNOWN", details or "", field, reason)
