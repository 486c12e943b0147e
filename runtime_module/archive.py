"""Reading the artifact's zip container without trusting what it declares.

Why a reader of our own on top of zipfile: an artifact may come from a stranger, and a zip's
central directory says whatever its writer wanted.  A 2 MB file declaring a 2 GB deflated
member made `inspect` take 4.4 GB of memory; `/dev/zero` or a FIFO given as an artifact made
it read forever.  provmap only ever writes stored (uncompressed) members, so here:

- the path must be a regular file (checked with stat before it is opened: opening a FIFO
  blocks), and it is opened without blocking and checked again;
- every member must be stored, unencrypted, listed once, with its compressed and declared sizes
  equal, and all members together no larger than the file itself: a member can then never
  expand to more bytes than the archive holds on disk (no amplification, whatever is declared);
- members are read in chunks, hashed as they stream, and the read stops at the declared size;
- the central directory is bounded (entries and bytes) before zipfile parses it: each entry
  costs ~0.8 KB of memory, so 200k empty members (a 20 MB file) took 184 MB; an artifact has a
  few files per partition.

Everything refused is one ProvmapError line naming the file and the member.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zipfile
from typing import TYPE_CHECKING

from provmap.provenance.util.errors import ProvmapError
from provmap.provenance.util.files import special_kind

if TYPE_CHECKING:
    from .staged import Staged

CHUNK = 1 << 20
MAX_MEMBERS = 50_000
MAX_DIRECTORY = 4 << 20  # bytes of central directory (an entry is 46 bytes and its name)


def open_regular(path) -> "os.PathLike":
    """An open binary file object for `path`, refusing anything but a regular file."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise ProvmapError(f"{p}: no such artifact") from None
    except OSError as e:
        raise ProvmapError(f"{p}: refused: cannot read artifact: {e.strerror or e}") from None
    _check_mode(p, st.st_mode)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ProvmapError(f"{p}: refused: cannot read artifact: {e.strerror or e}") from None
    _check_mode(p, os.fstat(fd).st_mode, fd)  # the name may have changed since the stat
    return os.fdopen(fd, "rb")


def _check_mode(p: str, mode: int, fd: int | None = None) -> None:
    if stat.S_ISREG(mode):
        return
    if fd is not None:
        os.close(fd)
    raise ProvmapError(f"{p}: refused: {special_kind(mode)}, not an artifact file")


class StoredZip:
    """A checked, read-only view of an artifact's zip: `names`, `size(name)`, `read(name)`."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._f = open_regular(path)
        try:
            self.file_size = os.fstat(self._f.fileno()).st_size
            self._check_directory()
            self._z = zipfile.ZipFile(self._f)
            self._infos = self._check(self._z.infolist())
        except BaseException:
            self._f.close()
            raise

    def _check_directory(self) -> None:
        end = zipfile._EndRecData(self._f)  # what ZipFile reads first (zip64 included)
        if not end:
            return  # not a zip: ZipFile says so
        entries, size = end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]
        if entries > MAX_MEMBERS or size > MAX_DIRECTORY:
            raise ProvmapError(f"{self.path}: refused: the zip directory lists {entries} "
                               f"members in {size} bytes (at most {MAX_MEMBERS} members in "
                               f"{MAX_DIRECTORY} bytes accepted)")

    def _check(self, infos) -> dict:
        out: dict[str, zipfile.ZipInfo] = {}
        total = 0
        for i in infos:
            name = i.filename
            if name in out:
                raise ProvmapError(f"{self.path}: refused: member {name!r} is listed twice")
            if i.flag_bits & 0x1:
                raise ProvmapError(f"{self.path}: refused: member {name!r} is encrypted")
            kind = stat.S_IFMT(i.external_attr >> 16)  # 0: no type recorded (writestr)
            if name.endswith("/") and i.file_size == 0 and kind in (0, stat.S_IFDIR):
                # the directory entries `zip -r` writes hold nothing: skipped, not refused as
                # "a special file" (issue 36's sixth afternoon: a hand re-zip needed -D)
                continue
            if kind and kind != stat.S_IFREG:  # a symlink (or device) entry, as unzip sees it
                raise ProvmapError(f"{self.path}: refused: member {name!r} is not a regular "
                                   "file (a symbolic link or special file entry)")
            if i.compress_type != zipfile.ZIP_STORED:
                raise ProvmapError(f"{self.path}: refused: member {name!r} is compressed "
                                   f"(method {i.compress_type}); provmap writes stored members "
                                   "only (an artifact re-zipped by hand: `zip -0 -r`, or "
                                   "zipfile.ZIP_STORED)")
            if i.file_size != i.compress_size or i.file_size > self.file_size:
                raise ProvmapError(f"{self.path}: refused: member {name!r} declares "
                                   f"{i.file_size} bytes in a {self.file_size}-byte file")
            total += i.file_size
            if total > self.file_size:
                raise ProvmapError(f"{self.path}: refused: members declare more bytes "
                                   f"({total}+) than the file holds ({self.file_size})")
            out[name] = i
        return out

    @property
    def names(self) -> list[str]:
        return list(self._infos)

    def size(self, name: str) -> int:
        return self._infos[name].file_size

    def read(self, name: str, sha256: str | None = None, limit: int | None = None) -> bytes:
        """The member's bytes, read in chunks; `sha256` (hex) is checked as they stream, and a
        member longer than `limit` is refused before it is read."""
        info = self._infos[name]
        if limit is not None and info.file_size > limit:
            raise ProvmapError(f"{self.path}: refused: member {name} is {info.file_size} bytes "
                               f"(at most {limit} accepted)")
        h = hashlib.sha256()
        buf = bytearray()
        with self._z.open(info) as f:
            while len(buf) < info.file_size:
                chunk = f.read(min(CHUNK, info.file_size - len(buf)))
                if not chunk:
                    break
                h.update(chunk)
                buf += chunk
        if len(buf) != info.file_size:
            raise ProvmapError(f"{self.path}: refused: member {name} is truncated")
        if sha256 is not None and h.hexdigest() != sha256:
            raise ProvmapError(f"{self.path}: refused: member {name} fails its SHA-256 check "
                               "(tampered or corrupted)")
        return bytes(buf)

    def stage(self, name: str, background: bool = False) -> "Staged":
        """The member as a private file (staged: a partition's weights, which the library reads
        from a file), hashed now or in a thread (`background`); `check_staged` compares."""
        from .staged import stage_range

        info = self._infos[name]
        return stage_range(self._f, self.path, self._data_offset(info), info.file_size, name,
                           background)

    def _data_offset(self, info) -> int:
        """Where a stored member's bytes start: after its local header, whose name must be the
        directory's (as zipfile checks when it opens a member)."""
        self._f.seek(info.header_offset)
        head = self._f.read(zipfile.sizeFileHeader)
        if len(head) != zipfile.sizeFileHeader or head[:4] != zipfile.stringFileHeader:
            raise ProvmapError(f"{self.path}: refused: member {info.filename} has no local "
                               "header where the directory says")
        n = int.from_bytes(head[26:28], "little")
        extra = int.from_bytes(head[28:30], "little")
        if self._f.read(n) != info.orig_filename.encode("utf-8" if info.flag_bits & 0x800
                                                        else "cp437"):
            raise ProvmapError(f"{self.path}: refused: member {info.filename}'s local header "
                               "names another file")
        start = info.header_offset + zipfile.sizeFileHeader + n + extra
        if start + info.file_size > self.file_size:
            raise ProvmapError(f"{self.path}: refused: member {info.filename} runs past the end "
                               "of the file")
        return start

    def close(self) -> None:
        self._z.close()
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def check_staged(path: str, name: str, staged: "Staged", sha256: str) -> None:
    """Refuse a staged member whose bytes are not the manifest's, as `StoredZip.read` refuses
    (its hash may have been computing in a thread until now)."""
    try:
        got = staged.sha256
    except OSError as e:
        raise ProvmapError(f"{path}: refused: cannot read member {name}: {e}") from None
    if got != sha256:
        raise ProvmapError(f"{path}: refused: member {name} fails its SHA-256 check "
                           "(tampered or corrupted)")
