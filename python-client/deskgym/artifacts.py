"""The artifact channel (ACI §6): directory trees into and out of an env (PutDir,
GetDir: typed entries and their bytes, no tar on the wire) and the server's
content-addressed artifact store (UploadArtifact, DownloadArtifact), every chunk with
its CRC-32, uploads and downloads resumable.

``Client.put_dir`` / ``get_dir`` and ``Client.artifacts`` are thin methods over this
module; ``Desktop.artifacts`` uploads on behalf of one env, so its recording gets an
``artifact`` event (sha256, size, name) and never the bytes.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import time
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypedDict

import grpc

from deskgym.calls import rpc_error
from deskgym.errors import DeskgymError
from deskgym.v1 import deskgym_pb2 as pb

__all__ = ["ArtifactRef", "Artifacts", "TreeStats", "tree_messages", "write_tree"]

#: Bytes per message of an upload or a tree (under the server's ``max_chunk_bytes``).
CHUNK = 1 << 20

#: Times an upload or download is resumed after a cut before the error is raised.
RESUMES = 3

#: Codes after which an upload or download is resumed: the connection or the server
#: failed, a chunk was damaged on the way, or reading the local file failed mid-stream
#: (gRPC reports that as UNKNOWN); a resume asks the server where to continue, so one
#: that was not needed costs a round trip. Anything else is the caller's to fix.
_RESUMABLE = {"UNAVAILABLE", "DATA_LOSS", "DEADLINE_EXCEEDED", "CANCELLED", "INTERNAL", "UNKNOWN"}

#: Seconds a resume first waits for the server to let go of the cut call (doubled each time).
_BUSY_WAIT_S = 0.2


class Connection(Protocol):
    """What this module needs of a :class:`deskgym.Client` (named here, not imported:
    the client's methods call into this module)."""

    address: str
    _stub: Any
    _metadata: Any


class ArtifactRef(TypedDict):
    """A stored artifact: its address (lowercase hex SHA-256) and size in bytes."""

    sha256: str
    size: int


class TreeStats(TypedDict):
    """What a tree transfer moved: the root in the sandbox (``put_dir``) or the local
    directory (``get_dir``), files, directories, bytes, and paths left out (symlinks,
    never followed, and anything but regular files and directories)."""

    path: str
    files: int
    dirs: int
    bytes: int
    skipped: list[str]


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def tree_messages(env_id: str, local: str | os.PathLike[str], dest: str, chunk: int = CHUNK,
                  skipped: list[str] | None = None) -> Iterator[pb.TreeEntry]:
    """PutDir's messages for the local directory ``local`` into ``dest``: the root,
    then each directory before what is in it and each regular file with its bytes, in
    name order. Symlinks are not followed (one could lead out of the tree) and, like
    FIFOs, sockets and devices, are left out; their paths are appended to ``skipped``."""
    top = os.fspath(local)
    if not os.path.isdir(top):
        raise DeskgymError("INVALID_ARGUMENT", f"{top!r} is not a local directory", "local")
    yield pb.TreeEntry(kind=pb.TREE_ENTRY_KIND_ROOT, env_id=env_id, path=dest)
    for here, dirs, files in os.walk(top, followlinks=False):
        dirs.sort()
        rel_here = os.path.relpath(here, top)
        names = sorted(dirs + files)
        keep = []
        for name in names:
            full = os.path.join(here, name)
            rel = name if rel_here == "." else f"{rel_here}/{name}".replace(os.sep, "/")
            st = os.lstat(full)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode):
                keep.append(name)
                yield pb.TreeEntry(kind=pb.TREE_ENTRY_KIND_DIR, path=rel, mode=mode)
            elif stat.S_ISREG(st.st_mode):
                yield from _file_messages(full, rel, mode, st.st_size, chunk)
            elif skipped is not None:
                skipped.append(rel)
        # Only real directories are walked into (os.walk lists a symlink to one as a dir).
        dirs[:] = [d for d in dirs if d in keep]


def _file_messages(full: str, rel: str, mode: int, size: int, chunk: int) -> Iterator[pb.TreeEntry]:
    """A FILE message and its DATA messages, read a chunk at a time (a large file is
    never held whole): ``size`` bytes, the size the walk saw; a file that grows
    meanwhile is cut there, one that shrinks fails the transfer."""
    with open(full, "rb") as f:
        sent = 0
        while True:
            piece = f.read(min(size - sent, chunk))
            if sent + len(piece) < size and not piece:
                raise DeskgymError("FAILED_PRECONDITION", f"{full} shrank while put_dir read it")
            if sent == 0:
                yield pb.TreeEntry(kind=pb.TREE_ENTRY_KIND_FILE, path=rel, mode=mode, size=size, data=piece,
                                   crc32=_crc(piece))
            else:
                yield pb.TreeEntry(kind=pb.TREE_ENTRY_KIND_DATA, data=piece, crc32=_crc(piece))
            sent += len(piece)
            if sent >= size:
                return


def _safe_join(root: str, rel: str) -> str:
    """``rel`` under ``root``; a path that would leave it (absolute, ``..``) is refused:
    a server is trusted, but a tree written to disk checks its own paths."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise DeskgymError("DATA_LOSS", f"GetDir sent the path {rel!r}, which would leave the tree")
    return os.path.join(root, *parts)


def write_tree(messages: Iterable[pb.TreeEntry], local: str | os.PathLike[str]) -> TreeStats:
    """Writes GetDir's stream under the local directory ``local`` (made if missing),
    checking each chunk's CRC-32 and giving each entry its mode; directories get theirs
    last, deepest first, so a read-only directory is still filled."""
    root = os.fspath(local)
    os.makedirs(root, exist_ok=True)
    stats = TreeStats(path=root, files=0, dirs=0, bytes=0, skipped=[])
    late: list[tuple[str, int]] = []
    out: Any = None
    owed = 0
    try:
        for m in messages:
            if m.kind in (pb.TREE_ENTRY_KIND_FILE, pb.TREE_ENTRY_KIND_DATA):
                if _crc(m.data) != m.crc32:
                    raise DeskgymError("DATA_LOSS", f"a chunk of {m.path or 'a file'!r} failed its CRC-32")
            if m.kind == pb.TREE_ENTRY_KIND_DIR:
                path = _safe_join(root, m.path)
                os.makedirs(path, exist_ok=True)
                late.append((path, m.mode))
                stats["dirs"] += 1
            elif m.kind == pb.TREE_ENTRY_KIND_FILE:
                if out is not None:
                    out.close()
                path = _safe_join(root, m.path)
                out = open(path, "wb")
                os.chmod(path, m.mode | 0o600)
                late.append((path, m.mode))
                out.write(m.data)
                owed = m.size - len(m.data)
                stats["files"] += 1
                stats["bytes"] += len(m.data)
            elif m.kind == pb.TREE_ENTRY_KIND_DATA:
                if out is None or len(m.data) > owed:
                    raise DeskgymError("DATA_LOSS", "GetDir sent file bytes beyond the file's size")
                out.write(m.data)
                owed -= len(m.data)
                stats["bytes"] += len(m.data)
            elif m.kind == pb.TREE_ENTRY_KIND_END:
                stats["skipped"] = list(m.skipped)
            elif m.kind == pb.TREE_ENTRY_KIND_ROOT:
                continue
    finally:
        if out is not None:
            out.close()
    for path, mode in reversed(late):
        os.chmod(path, mode)
    return stats


class Artifacts:
    """The server's artifact store as this client's principal sees it (``Client.artifacts``;
    ``Desktop.artifacts`` also names an env, whose recording then refers to each upload)."""

    def __init__(self, client: Connection, env_id: str = "") -> None:
        self.client, self.env_id = client, env_id

    def _stub(self) -> Any:
        return self.client._stub

    def _kw(self) -> dict[str, Any]:
        # Transfers are bounded by the server per message, not by the client's per-call
        # timeout (a 100 MB upload on a slow link is not a stuck call).
        return {"metadata": self.client._metadata}

    def _unary(self, method: str, req: Any) -> Any:
        try:
            return getattr(self._stub(), method)(req, **self._kw())
        except grpc.RpcError as e:
            raise rpc_error(e, self.client.address) from None

    def status(self, upload_id: str) -> int:
        """Bytes the server holds of an unfinished upload: where it resumes."""
        return int(self._unary("ArtifactUploadStatus", pb.ArtifactUploadStatusRequest(upload_id=upload_id)).offset)

    def upload(self, path: str | os.PathLike[str] | bytes, *, name: str | None = None,
               upload_id: str | None = None, chunk: int = CHUNK) -> ArtifactRef:
        """Stores a local file (or ``bytes``) and returns ``{"sha256", "size"}``. Each chunk
        carries its CRC-32 and the last the whole SHA-256; a cut connection or a damaged
        chunk resumes from the last chunk the server acknowledged (at most
        :data:`RESUMES` times). ``upload_id`` (random by default) lets another process
        resume it with the same call."""
        data = path if isinstance(path, bytes) else None
        local = "" if isinstance(path, bytes) else os.fspath(path)
        label = name if name is not None else os.path.basename(local)
        uid = upload_id or secrets.token_hex(16)
        size = len(data) if data is not None else os.path.getsize(local)
        digest = hashlib.sha256()
        if data is not None:
            digest.update(data)
        else:
            with open(local, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        sha = digest.hexdigest()
        offset = self.status(uid) if upload_id else 0
        for attempt in range(RESUMES + 1):
            try:
                r = self._stub().UploadArtifact(
                    self._chunks(data, local, uid, offset, size, sha, label, chunk), **self._kw())
                return ArtifactRef(sha256=r.sha256, size=r.size)
            except grpc.RpcError as e:
                err = rpc_error(e, self.client.address)
                # ABORTED: the server still holds the call that was cut (it has not seen
                # the cut yet); a resume waits for it, then asks again where to go on.
                retry = err.code in _RESUMABLE or (err.code == "ABORTED" and attempt > 0)
                if not retry or attempt == RESUMES:
                    raise err from None
                if err.code == "ABORTED":
                    time.sleep(_BUSY_WAIT_S * 2**attempt)
                offset = self.status(uid)
        raise AssertionError("unreachable")

    def _chunks(self, data: bytes | None, path: str, uid: str, offset: int, size: int, sha: str, label: str,
                chunk: int) -> Iterator[pb.ArtifactChunk]:
        f = None if data is not None else open(path, "rb")
        try:
            if f is not None:
                f.seek(offset)
            at = offset
            first = True
            while True:
                piece = data[at : at + chunk] if data is not None else f.read(chunk)  # type: ignore[union-attr]
                last = at + len(piece) >= size
                m = pb.ArtifactChunk(offset=at, data=piece, crc32=_crc(piece), last=last)
                if first:
                    m.upload_id, m.env_id, m.name = uid, self.env_id, label[:256]
                    first = False
                if last:
                    m.sha256 = sha
                yield m
                at += len(piece)
                if last:
                    return
        finally:
            if f is not None:
                f.close()

    def download(self, sha256: str, path: str | os.PathLike[str]) -> ArtifactRef:
        """Writes artifact ``sha256`` to the local ``path``, checking each chunk's CRC-32
        and the whole SHA-256. A file already at ``path`` shorter than the artifact is
        continued from its end (a cut download resumes); NOT_FOUND for an artifact this
        principal never uploaded."""
        dest = os.fspath(path)
        have = os.path.getsize(dest) if os.path.exists(dest) else 0
        for attempt in range(RESUMES + 1):
            try:
                size = self._fetch(sha256, dest, have)
                break
            except grpc.RpcError as e:
                err = rpc_error(e, self.client.address)
                if err.code not in _RESUMABLE or attempt == RESUMES:
                    raise err from None
            except DeskgymError as e:
                if e.code != "DATA_LOSS" or attempt == RESUMES:
                    raise
            have = os.path.getsize(dest)
        digest = hashlib.sha256()
        with open(dest, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != sha256:
            raise DeskgymError("DATA_LOSS", f"{dest} hashes to {digest.hexdigest()}, not {sha256}; delete it and retry")
        return ArtifactRef(sha256=sha256, size=size)

    def _fetch(self, sha256: str, dest: str, have: int) -> int:
        """Appends the artifact from ``have`` to ``dest``; its size. A file longer than the
        artifact starts over."""
        stream = self._stub().DownloadArtifact(pb.DownloadArtifactRequest(sha256=sha256, offset=have), **self._kw())
        size = have
        with open(dest, "r+b" if have else "wb") as out:
            out.seek(have)
            out.truncate()
            for m in stream:
                if _crc(m.data) != m.crc32:
                    raise DeskgymError("DATA_LOSS", f"chunk at {m.offset} of {sha256} failed its CRC-32")
                out.write(m.data)
                size = m.size
        return size

    def delete(self, sha256: str = "", *, upload_id: str = "") -> int:
        """Drops this principal's artifact (or unfinished upload); the share bytes freed."""
        req = pb.DeleteArtifactRequest(sha256=sha256, upload_id=upload_id)
        return int(self._unary("DeleteArtifact", req).freed_bytes)


def put_dir(client: Connection, env_id: str, local: str | os.PathLike[str], dest: str) -> TreeStats:
    """Sends the local directory ``local`` to ``dest`` in the env's sandbox (PutDir)."""
    skipped: list[str] = []
    try:
        r = client._stub.PutDir(tree_messages(env_id, local, dest, skipped=skipped), metadata=client._metadata)
    except grpc.RpcError as e:
        raise rpc_error(e, client.address) from None
    return TreeStats(path=r.path, files=r.files, dirs=r.dirs, bytes=r.bytes, skipped=skipped)


def get_dir(client: Connection, env_id: str, src: str, local: str | os.PathLike[str]) -> TreeStats:
    """Fetches the directory ``src`` of the env's sandbox into the local ``local`` (GetDir)."""
    try:
        stream = client._stub.GetDir(pb.GetDirRequest(env_id=env_id, path=src), metadata=client._metadata)
        return write_tree(stream, local)
    except grpc.RpcError as e:
        raise rpc_error(e, client.address) from None
