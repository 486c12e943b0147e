"""What kind of file a path is, in the words provmap's refusals use.

Opening a FIFO blocks until a writer appears and reading /dev/zero never ends, so every file a
command reads (an artifact, a model, an --inputs or --profile file) is checked with stat first;
this is the one place that names what was found instead (issue 36: only artifacts were checked,
`compile FIFO` and `run A --inputs FIFO` hung)."""

from __future__ import annotations

import os
import stat


def special_kind(mode: int) -> str | None:
    """None for a regular file, else what it is ("a FIFO", "a device", ...)."""
    if stat.S_ISREG(mode):
        return None
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def refuse_special_file(path) -> None:
    """Raise ProvmapError `<path>: not a regular file (a FIFO)` for an existing FIFO, device or
    socket.  A missing path or a directory is left to the reader, whose messages say more
    (no such file, which file a directory should hold)."""
    from .errors import ProvmapError

    p = os.fspath(path)
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return
    kind = special_kind(mode)
    if kind is not None and not stat.S_ISDIR(mode):
        raise ProvmapError(f"{p}: not a regular file ({kind})")


def refuse_absent_model(label: str) -> None:
    """The model reader's first two refusals, stdlib only: the command line says them before
    importing TVM (issue 53), the reader (provmap.provenance.importer) after."""
    from .errors import ProvmapError

    if not os.path.exists(label):
        raise ProvmapError(f"{label}: no such file")
    if os.path.isdir(label):
        raise ProvmapError(f"{label}: is a directory, not an ONNX file")


def is_artifact_file(path) -> bool:
    """A zip whose directory names a manifest.json: what `compile` writes (an ONNX-taking
    command given one said "Wire format was corrupt")."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            return "manifest.json" in z.namelist()
    except Exception:  # noqa: BLE001 - not a zip, or unreadable: not an artifact
        return False


def unreadable_model(path, why: str):
    """The error for a file onnx cannot read as a model (a ProvmapError to raise)."""
    from .errors import ProvmapError

    if is_artifact_file(path):
        return ProvmapError(f"{path}: a provmap artifact, not an ONNX model; give the ONNX "
                            "model it was compiled from")
    return ProvmapError(f"{path}: not a readable ONNX model ({why})")
