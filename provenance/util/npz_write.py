"""An .npz written member by member, each array's name mapped to a member name that is its own
and stays inside the archive.

Why not `np.savez(f, **arrays)`: it takes the names as keyword arguments, so a model output
named `allow_pickle` was taken for the option and silently left out of `run -o out.npz`, one
named `file` was `TypeError: savez() got multiple values`, and one named `../../../../tmp/x`
became a member that an unzip tool extracts outside its directory (issue 52).  Here every name
is a member `<key>.npy`, written with `np.lib.format.write_array`, where `key` is the name with
`%`, `/`, `\\` and control characters percent-encoded (UTF-8 bytes, `%2F`): one path component,
never `.` or `..` alone once `.npy` is added, and distinct names stay distinct.  `np.load(f)[key]`
reads it back; for an ordinary name the key is the name itself.  docs/cli.md says so.
"""

from __future__ import annotations

import zipfile

_ESCAPED = {"%", "/", "\\"}


def npz_key(name: str) -> str:
    """The key `np.load` gives the array named `name` in a file `write_npz` wrote."""
    out = []
    for ch in str(name):
        if ch in _ESCAPED or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
        else:
            out.append(ch)
    return "".join(out)


def npz_name(key: str) -> str:
    """The name `npz_key` wrote as `key` (a bisect reproducer's boundary tensor `attn/out`, or a
    `run --save-inputs` file given back as `--inputs`).  Only the escapes it writes are read:
    an ordinary key is its own name."""
    if "%" not in key:
        return key
    import re
    from urllib.parse import unquote

    return re.sub(r"(?:%[0-9A-F]{2})+", lambda m: unquote(m.group(0), errors="strict")
                  if _written(m.group(0)) else m.group(0), key)


def _written(run: str) -> bool:
    """A run of %XX escapes npz_key could have written (the escaped set, or UTF-8 of none)."""
    codes = [int(run[i + 1:i + 3], 16) for i in range(0, len(run), 3)]
    return all(c in (0x25, 0x2F, 0x5C, 0x7F) or c < 0x20 for c in codes)


def read_npz(path) -> dict:
    """{name: array} of an .npz, names as `write_npz` was given them."""
    import numpy as np

    with np.load(path, allow_pickle=False) as z:
        return {npz_name(k): z[k] for k in z.files}


def write_npz(f, arrays: dict) -> None:
    """`arrays` ({name: array}) into the open binary file `f` as an uncompressed .npz, as
    np.savez lays it out (stored members, zip64), one member per name (`npz_key`)."""
    import numpy as np

    seen: dict[str, str] = {}
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, a in arrays.items():
            key = npz_key(name)
            if key in seen:  # only for names that are equal as strings: str(name) of two keys
                raise ValueError(f"arrays {seen[key]!r} and {name!r} share the name {key!r}")
            seen[key] = name
            with z.open(f"{key}.npy", "w", force_zip64=True) as m:
                # allow_pickle as np.savez: a string output is an object array
                np.lib.format.write_array(m, np.asanyarray(a), allow_pickle=True)
