"""A partition's weights kept in a private file, not in memory: the member a library maps.

Why: every member used to be held as bytes.  Loading the single:onnxruntime artifact of a
1B-parameter decoder read its 3.85 GB of weights out of the zip into memory, and ONNX Runtime
then made its own copy: 7.8 GB peak where ORT's own session on the user's file takes 4.0 GB
(issue 51 asks at most 1.3x).  The libraries themselves never need the weights in Python:
ORT reads a model's external data from a file and OpenVINO maps an IR's `model.bin`.  So a
weight member (`model.data`, `model.bin`) of `STAGE_MIN` bytes or more lives in a file of its
own in a private scratch directory: a build moves the file the library wrote there (no copy at
all), a read links to the artifact itself (the member's bytes where the zip stores them) or
copies the member out of it, and saving streams it back in.  Each staged file sits alone in its directory under its member's base name, so a
graph written beside it finds it by the name it was built with.  The directory goes when the
`Staged` value is collected (a library that mapped the file keeps its pages: Linux keeps an
unlinked file's mapping), and at exit.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading
import weakref

#: Weight members from this size on are staged; below it bytes are cheaper than a file.
STAGE_MIN = 32 << 20
#: The member base names that hold only weights a library reads from a file.
WEIGHT_FILES = frozenset({"model.data", "model.bin"})
CHUNK = 1 << 20

_root: str | None = None


def _scratch() -> str:
    """A fresh private directory under one per-process root (mode 0700, removed at exit)."""
    global _root
    if _root is None or not os.path.isdir(_root):
        _root = tempfile.mkdtemp(prefix="provmap-members-")
        atexit.register(shutil.rmtree, _root, True)
    return tempfile.mkdtemp(dir=_root)


def stageable(name: str, size: int) -> bool:
    """Whether member `name` (a path inside the artifact) is kept in a file when read."""
    return size >= STAGE_MIN and name.rsplit("/", 1)[-1] in WEIGHT_FILES


class Staged:
    """A member's bytes in a private file: `size` bytes from `offset` of `path` (a file of its
    own at offset 0, or a private hard link to the artifact itself, the member's bytes where
    the zip stores them), and their SHA-256 (hex), which may still be computing in a thread
    (`sha256` waits for it).  `len()` and `bytes()` work as on the bytes it stands for;
    `bytes()` reads them all, so callers that only pass the weights on use the file."""

    __slots__ = ("path", "size", "offset", "_sha", "_thread", "__weakref__")

    def __init__(self, path: str, size: int, sha256: str | None, offset: int = 0):
        self.path, self.size, self.offset, self._sha = path, size, offset, sha256
        self._thread: threading.Thread | None = None
        weakref.finalize(self, shutil.rmtree, os.path.dirname(path), True)

    @property
    def sha256(self) -> str:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if isinstance(self._sha, BaseException):
            raise self._sha
        return self._sha

    def _hash(self) -> None:
        try:
            self._sha = _hash_range(self.path, self.offset, self.size)
        except BaseException as e:  # said by `sha256`, in the caller's thread
            self._sha = e

    def hash_in_background(self) -> None:
        """Compute the hash in a thread (the library reads the file meanwhile: a 4 GB member
        hashes in ~3 s, as long as ORT takes to make its session); `sha256` joins it."""
        self._thread = threading.Thread(target=self._hash, name="provmap-member-hash",
                                        daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            return f.read(self.size)

    def write_to(self, out) -> None:
        """Copy the bytes into the binary file `out` (saving), in chunks."""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            left = self.size
            while left > 0:
                chunk = f.read(min(CHUNK, left))
                if not chunk:
                    raise OSError(f"{self.path}: shorter than its {self.size} bytes")
                out.write(chunk)
                left -= len(chunk)

    def __repr__(self) -> str:
        return f"Staged({self.path!r}, {self.size} bytes at {self.offset})"

    def beside(self, data: bytes, suffix: str) -> str:
        """Write `data` to a new file in this file's directory (a graph naming this file by its
        base name) and return its path; the caller removes it once the library has read it."""
        fd, path = tempfile.mkstemp(dir=os.path.dirname(self.path), suffix=suffix)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path


def _hash_range(path: str, offset: int, size: int) -> str:
    """SHA-256 of `size` bytes at `offset` of `path` (fewer if the file is shorter: the
    digest then differs from any member's), read into one reused buffer."""
    h = hashlib.sha256()
    buf = memoryview(bytearray(min(8 * CHUNK, max(size, 1))))
    fd = os.open(path, os.O_RDONLY)
    try:
        left, at = size, offset
        while left > 0:
            k = os.preadv(fd, [buf[:min(len(buf), left)]], at)
            if k <= 0:
                break
            h.update(buf[:k])
            left -= k
            at += k
    finally:
        os.close(fd)
    return h.hexdigest()


def stage_file(src: str, name: str) -> Staged:
    """Move a file provmap just wrote (a library's output in a scratch directory about to be
    removed) into a staged file named `name`, hashing it once."""
    dest = os.path.join(_scratch(), name)
    try:
        os.replace(src, dest)
    except OSError:  # another filesystem
        shutil.copyfile(src, dest)
        os.unlink(src)
    staged = Staged(dest, os.path.getsize(dest), None)
    staged._hash()
    return staged


def weight_member(path: str, name: str):
    """A weights file a library just wrote, as a blob keeps it: staged when large (never read
    into memory), else its bytes (below STAGE_MIN a file costs more than it saves)."""
    if os.path.getsize(path) >= STAGE_MIN:
        return stage_file(path, name)
    with open(path, "rb") as f:
        return f.read()


def _copy_range(src: int, dst: int, offset: int, size: int) -> None:
    """`size` bytes from `offset` of `src` to the end of `dst`: in the kernel where it can
    (copy_file_range, Linux), else through one reused buffer."""
    done = 0
    if hasattr(os, "copy_file_range"):
        try:
            while done < size:
                k = os.copy_file_range(src, dst, min(1 << 30, size - done), offset + done)
                if k <= 0:
                    return
                done += k
            return
        except OSError:  # a filesystem without it: the buffer below goes on from `done`
            pass
    buf = memoryview(bytearray(min(8 * CHUNK, max(size, 1))))
    while done < size:
        k = os.preadv(src, [buf[:min(len(buf), size - done)]], offset + done)
        if k <= 0:
            return
        chunk = buf[:k]
        while chunk:
            chunk = chunk[os.write(dst, chunk):]
        done += k


def stage_range(f, path: str, offset: int, size: int, name: str,
                background: bool = False) -> Staged:
    """The `size` bytes at `offset` of the open file `f` (the artifact, opened as `path`) as a
    staged member named `name`: a hard link to the file when the scratch directory is on its
    filesystem and the name still leads to the file `f` is (nothing is copied: a 4 GB member
    was 4.3 s of copying), else a copy of the range.  Hashed now, or in a thread
    (`background`)."""
    d = _scratch()
    dest = os.path.join(d, os.path.basename(name))
    fd = f.fileno()
    try:
        try:
            os.link(path, dest)
            a, b = os.stat(dest), os.fstat(fd)
            if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
                raise OSError("the name no longer leads to the file read")
            start = offset
        except OSError:
            if os.path.lexists(dest):
                os.unlink(dest)
            out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _copy_range(fd, out, offset, size)
            finally:
                os.close(out)
            start = 0
        staged = Staged(dest, size, None, start)
        if background:
            staged.hash_in_background()
        else:
            staged._hash()
        return staged
    except BaseException:
        shutil.rmtree(d, True)
        raise


def digest(data) -> str:
    """SHA-256 (hex) of a member's bytes or of a staged member (hashed when it was staged)."""
    if isinstance(data, Staged):
        return data.sha256
    return hashlib.sha256(data).hexdigest()
