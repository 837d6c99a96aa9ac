"""An env's event log as it happens, for asyncio: the ``WatchEvents`` stream of
:meth:`deskgym.aio.AsyncClient.watch_events` and :meth:`deskgym.aio.AsyncSession.events`
(the sync client's :class:`deskgym.EventStream`, awaited)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from deskgym.calls import EnvEvent, checked, closed_client, rpc_error
from deskgym.errors import DeskgymError
from deskgym.v1 import deskgym_pb2 as pb

if TYPE_CHECKING:
    # One package: the client makes these streams and each stream reads the client's
    # channel, stub and open-stream set.
    from deskgym.aio.client import AsyncClient

__all__ = ["AsyncEventStream"]


class AsyncEventStream:
    """A live ``WatchEvents`` stream for asyncio (:meth:`AsyncClient.watch_events`): an
    async iterator of :class:`deskgym.EnvEvent`. ``await stream`` or ``async with
    stream`` starts it and returns once the server watches the env (a refused env
    raises there: NOT_FOUND); iterating a stream not yet started starts it first. It
    ends (``StopAsyncIteration``) when the env's pool closes or :meth:`close` is
    called; cancelling the task that reads it cancels the call. A reader that falls
    behind loses the oldest events, counted in the next one's ``lost``."""

    def __init__(self, client: AsyncClient, env_id: str, budget: float) -> None:
        self._client, self.env_id, self._budget = client, env_id, budget
        self._call: Any = None
        self._closed = False

    async def start(self) -> AsyncEventStream:
        """Opens the call and waits until the server watches (idempotent)."""
        if self._call is not None or self._closed:
            return self
        c = self._client
        if c._closed:
            raise closed_client()
        self._call = c._stub.WatchEvents(pb.WatchEventsRequest(env_id=self.env_id), metadata=c._metadata)
        c._streams.add(self)
        try:
            # The server answers its headers once it watches the env: from here on no
            # event is missed. A refused call ends at once, its status with the headers.
            await asyncio.wait_for(self._call.initial_metadata(), self._budget)
            if self._call.done():
                await self._call.read()  # raises the refusal; an OK end reads as EOF
        except asyncio.TimeoutError:
            self.close()
            raise DeskgymError("DEADLINE_EXCEEDED", f"the server did not start watching env {self.env_id} "
                               f"within {self._budget} s") from None
        except grpc.RpcError as e:
            self.close()
            raise rpc_error(e, c.address) from None
        except BaseException:
            self.close()
            raise
        return self

    def __await__(self) -> Any:
        return self.start().__await__()

    async def __aenter__(self) -> AsyncEventStream:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> EnvEvent:
        await self.start()
        if self._closed:
            raise StopAsyncIteration
        try:
            m = await self._call.read()
        except grpc.RpcError as e:
            self.close()
            if e.code() == grpc.StatusCode.CANCELLED:
                raise StopAsyncIteration from None
            raise rpc_error(e, self._client.address) from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closed and not (task is not None and task.cancelling()):
                # grpc.aio answers a read of a call cancelled here (close() from another
                # task, or the client's) with CancelledError: for the reader, the end.
                raise StopAsyncIteration from None
            self.close()  # the reader itself was cancelled: the call goes with it
            raise
        except BaseException:
            self.close()
            raise
        if m is grpc.aio.EOF:
            self.close()
            raise StopAsyncIteration
        return EnvEvent.from_proto(checked(m, pb.EnvEvent))

    def close(self) -> None:
        """Stops watching (idempotent)."""
        self._closed = True
        if self._call is not None:
            self._call.cancel()
        self._client._streams.discard(self)
