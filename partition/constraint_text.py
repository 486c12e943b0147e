"""The text of --pin/--forbid NODE=BACKEND, checked without the model.

constraints.py resolves NODE against the imported model; what the text alone shows (no `=`, a
backend the search does not use) is refused here, by the same functions, and the command line
runs `check_texts` before importing the search: that import and the model's take seconds, and a
typo in a flag was said only after them (issue 53)."""

from __future__ import annotations

from provmap.provenance.util.errors import ProvmapError, did_you_mean


def split_assignment(text: str, flag: str) -> tuple[str, str]:
    """NODE=BACKEND at the last '=' outside brackets: a backend variant carries its own
    (`relu=openvino[threads=1]` split at the last '=' named the backend '1]')."""
    depth, at = 0, -1
    for k in range(len(text) - 1, -1, -1):
        c = text[k]
        depth += (c == "]") - (c == "[")
        if c == "=" and depth == 0:
            at = k
            break
    node, sep, backend = (text[:at], "=", text[at + 1:]) if at >= 0 else ("", "", text)
    if not sep or not node.strip() or not backend.strip():
        raise ProvmapError(f"{flag} {text!r}: expected NODE=BACKEND")
    return node.strip(), backend.strip()


def check_backend(backend: str, backends: list[str], flag: str) -> None:
    if backend not in backends:
        from provmap.runtime_module.registry import available_backends, parse_variant

        known = parse_variant(backend)[0] in available_backends() if backend else False
        what = "a backend this search does not use" if known else "unknown backend"
        fix = (f"; name it in the strategy, collage:{','.join([*backends, backend])}, to pin "
               "to it" if known else "")
        raise ProvmapError(f"{flag}: {what} {backend!r} (the search uses "
                           f"{', '.join(backends) or 'no backend'}{fix})"
                           + did_you_mean(backend, backends))


def check_texts(pins, forbids, backends) -> None:
    """What parse_constraints would refuse in `pins` and `forbids` before it reads the model,
    in its order."""
    backends = list(backends)
    for flag, texts in (("--pin", pins), ("--forbid", forbids)):
        for text in texts or ():
            check_backend(split_assignment(text, flag)[1], backends, f"{flag} {text}")
