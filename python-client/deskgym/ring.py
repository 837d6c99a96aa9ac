"""Shared-memory frames: observations read straight from the server's memory.

A client on the server's host (connected to its unix socket, ``unix:PATH``) asks for a
frame ring (``AttachFrames``), collects the ring's memory on the same socket (the
server passes a sealed memfd), and names the ring in its requests. The server then
writes each frame into a slot of the ring instead of the reply, and the client hands
out a read-only numpy view of that slot: no protobuf bytes, no copy.

A slot stays the client's until every array that views it is gone; only then does the
client write the slot's sequence number into its *released* word and the server may
reuse it. An observation a user keeps therefore never changes. A client that keeps
every slot gets its next frames as bytes, as a remote client does.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
import struct
import weakref
from typing import Any

import numpy as np

from deskgym.errors import DeskgymError
from deskgym.v1 import deskgym_pb2 as pb

#: What the client sends on the unix socket before its ticket.
HELLO = b"DESKGYM-RING "
#: Bytes of one slot's record in the ring's header.
RECORD = 64
_WORD = struct.Struct("<Q")


class _Lease:
    """One slot's frame. numpy arrays made from it (and every view of those) keep it
    alive; when the last one goes, the slot is released to the server."""

    __slots__ = ("__array_interface__", "ring", "slot", "seq", "__weakref__")

    def __init__(self, ring: FrameRing, slot: pb.FrameSlot, shape: tuple[int, ...]) -> None:
        self.ring = ring
        self.slot = slot.slot
        self.seq = slot.seq
        self.__array_interface__ = {
            "version": 3,
            "shape": shape,
            "typestr": "|u1",
            # Read-only: the memory is the server's to write, never the user's.
            "data": (ring.address + slot.offset, True),
        }

    def __del__(self) -> None:
        self.ring.release(self.slot, self.seq)


class FrameRing:
    """A collected ring: its memory mapped, its connection held open (the server drops
    the ring when that connection closes)."""

    def __init__(self, path: str, attached: pb.AttachFramesResponse) -> None:
        self.ring = attached.ring
        self.slots = attached.slots
        self.size = attached.size
        self.pid = os.getpid()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(10.0)
            sock.connect(path)
            sock.sendall(HELLO + attached.ticket.encode() + b"\n")
            msg, fds, _, _ = socket.recv_fds(sock, 1, 1)
        except OSError as e:
            sock.close()
            raise DeskgymError("UNAVAILABLE", f"collecting the frame ring on {path}: {e}") from None
        if msg != b"+" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            sock.close()
            raise DeskgymError("FAILED_PRECONDITION", f"the server refused the frame ring's ticket on {path}")
        try:
            self._mm = mmap.mmap(fds[0], attached.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fds[0])
        sock.settimeout(None)
        self._sock = sock
        # The mapping's address, pinned: the mmap cannot be closed while this exists,
        # so a view handed out can never outlive its memory.
        self._pin = ctypes.c_char.from_buffer(self._mm)
        self.address = ctypes.addressof(self._pin)
        #: Frames delivered through the ring that are still alive, by (hash, encoding):
        #: a ``not_modified`` answer rebuilds from them.
        self.held: weakref.WeakValueDictionary[tuple[str, int], _Lease] = weakref.WeakValueDictionary()
        self.delivered = 0

    def close(self) -> None:
        """Hands the ring back (views already made stay readable)."""
        self._sock.close()

    def alive(self) -> bool:
        """Whether the server still holds the ring (a restarted server does not)."""
        try:
            return self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def release(self, slot: int, seq: int) -> None:
        try:
            _WORD.pack_into(self._mm, slot * RECORD + 8, seq)
        except (ValueError, TypeError):
            pass  # interpreter shutdown: the mapping is gone, and so is the server's use

    def frame(self, obs: pb.Observation) -> Any:
        """The pixels of an observation delivered into this ring: a read-only (H, W, 3)
        uint8 array over the slot for raw frames, the encoded bytes (copied, the slot
        released at once) for PNG and JPEG."""
        s = obs.slot
        if s.ring != self.ring or s.slot >= self.slots or s.offset + s.length > self.size:
            raise DeskgymError("INTERNAL", f"a frame slot outside frame ring {self.ring}: {s}")
        published = _WORD.unpack_from(self._mm, s.slot * RECORD)[0]
        if published != s.seq:
            raise DeskgymError("INTERNAL", f"frame ring {self.ring} slot {s.slot} holds {published}, not {s.seq}")
        self.delivered += 1
        if obs.encoding != pb.IMAGE_ENCODING_RAW_RGB:
            data = self._mm[s.offset:s.offset + s.length]
            self.release(s.slot, s.seq)
            return data
        if s.length != obs.width * obs.height * 3:
            raise DeskgymError("INTERNAL", f"frame slot of {s.length} bytes for {obs.width}x{obs.height}")
        lease = _Lease(self, s, (obs.height, obs.width, 3))
        self.held[(obs.frame_hash, obs.encoding)] = lease
        return np.asarray(lease)

    def find(self, key: tuple[str, int]) -> np.ndarray | None:
        """A frame of the ring still alive, as a new view (``None`` when gone)."""
        lease = self.held.get(key)
        return None if lease is None else np.asarray(lease)
