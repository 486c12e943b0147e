"""Atomic file writes: a temp file in the destination directory, fsync, then ``os.replace``.

Every file provmap writes (maps, artifacts, npz outputs, reports) is written at the end of long
work and read by other processes; a half-written file that loads "successfully" would silently
lose data, so nothing is ever written in place.  `check_writable` lets a command refuse a bad
output path before the work rather than after it."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path


#: Temp files created and not yet renamed or removed: what native_stop removes when it ends
#: the process on Ctrl-C (a native call that would not stop), so no `.name.xxxx.tmp` is left.
_staged: set[Path] = set()


def _new_temp(dest: Path) -> Path:
    """Create an empty, exclusive temp file next to `dest`.

    Same directory so `os.replace` is a rename on one filesystem (atomic); created with mode
    0o666 via os.open (not mkstemp's 0o600) so the final file gets the caller's umask.
    """
    while True:
        tmp = dest.parent / f".{dest.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        _staged.add(tmp)
        return tmp


def discard_temp(tmp: Path) -> None:
    _staged.discard(tmp)
    for p in (tmp, Path(f"{tmp}-journal"), Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


def discard_staged() -> None:
    """Remove every temp file still staged (the process is about to end without finishing)."""
    for tmp in list(_staged):
        with contextlib.suppress(OSError):
            discard_temp(tmp)


def _fsync_path(path: Path, directory: bool = False) -> None:
    """Flush to disk before the rename, or a crash could leave a renamed-but-empty file."""
    try:
        fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    except OSError:
        if directory:  # some platforms/filesystems cannot open directories; best effort
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


def resolve_output(path: str | os.PathLike) -> Path:
    """The file an output path names: a symbolic link is followed to its target, which is what
    gets replaced; the link itself never is (issue 36: as root, `report -o /dev/stdout > f`
    replaced the system link /dev/stdout with a regular file).  A dangling link names its
    target as a new path."""
    p = Path(path)
    if not p.is_symlink():
        return p
    why = ""
    try:
        return Path(os.path.realpath(p, strict=True))
    except FileNotFoundError:  # dangling: its target is a new path
        target = Path(os.path.realpath(p))
        if not target.is_symlink():
            return target
        # else realpath gave up inside a loop
    except OSError as e:  # a loop of links names no file at all
        why = f" ({e.strerror})"
    from .errors import ProvmapError

    raise ProvmapError(f"{path}: a loop of symbolic links{why}; it names no file to write")


def stage_file(dest: Path, write) -> Path:
    """`write(tmp)` into a fresh temp file next to `dest` (next to its target if `dest` is a
    symbolic link, so the rename stays on one filesystem); the temp never outlives a failure."""
    tmp = _new_temp(resolve_output(dest))
    try:
        write(tmp)
        _fsync_path(tmp)
    except BaseException:
        discard_temp(tmp)
        raise
    return tmp


def _refuse_special(dest: Path) -> None:
    """The last word before a rename: a device, FIFO or socket is never replaced by a regular
    file, whichever name (a map's OUT.sqlite, a link's target) led here."""
    from .errors import ProvmapError

    try:
        mode = os.stat(dest).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise ProvmapError(f"{dest}: is a device or special file; provmap writes only regular "
                           "files")


#: (device, inode) of the files the running command reads (protect_inputs): never replaced.
_PROTECTED: dict[tuple[int, int], str] = {}


def protect_inputs(paths) -> None:
    """Name the files this process reads, so that no output of it can replace one, whatever
    path, link or directory leads there (the CLI's preflight checks the names it knows of;
    this catches the rest at the moment of writing).  Each call replaces the previous set: one
    command at a time (an empty list ends the protection)."""
    _PROTECTED.clear()
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        _PROTECTED[(st.st_dev, st.st_ino)] = os.fspath(p)


def _refuse_protected(dest: Path) -> None:
    try:
        st = os.stat(dest)
    except OSError:
        return
    hit = _PROTECTED.get((st.st_dev, st.st_ino))
    if hit is not None:
        from .errors import ProvmapError

        raise ProvmapError(f"{dest} is this command's input {hit}: not replaced; write the "
                           "output elsewhere")


def commit_temp(tmp: Path, dest: Path) -> None:
    from .interrupt import raise_if_interrupted

    try:
        raise_if_interrupted()  # work a library let go on after Ctrl-C is not written
        dest = resolve_output(dest)  # the link's target is replaced, never the link
        _refuse_special(dest)
        _refuse_protected(dest)
        os.replace(tmp, dest)
        _staged.discard(tmp)
    except BaseException:
        discard_temp(tmp)
        raise
    _fsync_path(dest.parent, directory=True)


def write_atomic(path: str | os.PathLike, write) -> Path:
    """Any file, all or nothing: `write(tmp)` fills a temp file next to `path` (creating its
    directory), which is fsynced and renamed over `path`.  Every provmap output goes through
    this (maps, artifacts, reports, reproducers, bench results), so an interrupted or failing
    command never leaves a half-written file."""
    dest = resolve_output(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    commit_temp(stage_file(dest, write), dest)
    return dest


def check_writable(path: str | os.PathLike, directory: bool = False) -> None:
    """Refuse, before any work, an output that could not or should not be written at the end.

    `path` is a regular file to create or replace (or, with `directory`, a directory to create
    or fill).  A device, FIFO or socket is refused, and so is a file whose directory does not
    exist (a typo in it used to create directories silently); a directory output is created,
    its parent must exist.  Raises ProvmapError naming the path.
    """
    from .errors import ProvmapError

    given = Path(path)
    if not directory and given.is_symlink():
        # What the link leads to decides (/dev/stdout -> /proc/self/fd/1 -> a pipe or a tty is
        # a special file, refused below by its own name); a regular file or a new path is then
        # checked as if it had been named itself.
        with contextlib.suppress(OSError):
            if not stat.S_ISREG(os.stat(given).st_mode) and not given.is_dir():
                raise ProvmapError(f"{given}: a link to a device or special file; provmap "
                                   "writes only regular files")
    p = given if directory else resolve_output(given)
    if not directory and p.is_dir():
        raise ProvmapError(f"{p}: is a directory; give a file name to write")
    if directory and p.exists() and not p.is_dir():
        raise ProvmapError(f"{p}: exists and is not a directory")
    if not directory and p.exists() and not stat.S_ISREG(os.stat(p).st_mode):
        # The temp-and-rename write would replace a device node with a regular file (as root,
        # `-o /dev/full` turned /dev/full into a 120 KB file: issue 36).
        raise ProvmapError(f"{p}: is a device or special file; provmap writes only regular "
                           "files")
    if not p.exists() and not p.parent.exists():
        # A directory output is created, but not its parents: `overlays -o /nonexist/x`
        # used to create /nonexist as well (issue 36).
        raise ProvmapError(f"{p}: directory {p.parent} does not exist; create it first")
    base = p if directory else p.parent
    while not base.exists():
        base = base.parent
    if not base.is_dir():
        raise ProvmapError(f"{p}: cannot write here: {base} is not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ProvmapError(f"{p}: cannot write here: {base} is not writable")
    if not directory and p.exists() and not os.access(p, os.W_OK) and not os.access(p.parent, os.W_OK):
        raise ProvmapError(f"{p}: cannot write here: the file is read-only")
    # os.access answers yes for root everywhere, and /proc or a read-only mount refuse new files
    # whatever the modes say: only creating the temp file write_atomic will create is an answer.
    try:
        discard_temp(_new_temp(base / (p.name or "probe")))
    except OSError as e:
        raise ProvmapError(f"{p}: cannot write here: {base} is not writable "
                           f"({e.strerror or e})") from None


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_bytes(data))


def save_npz_atomic(path: str | os.PathLike, arrays: dict) -> Path:
    """`arrays` as an .npz, all or nothing; members written by name (npz_write: never np.savez,
    whose keywords a name such as `allow_pickle` or `file` collided with)."""
    def write(tmp: Path) -> None:
        from .npz_write import write_npz  # here: the CLI's start-up imports this module

        with open(tmp, "wb") as f:
            write_npz(f, arrays)

    return write_atomic(path, write)
