"""User-facing errors.

The CLI turns a ProvmapError into one line on stderr and a non-zero exit, so every message must
stand alone: it names the file or the ONNX node (index, name, op type) at fault.
"""


class ProvmapError(Exception):
    """An error caused by the user's input, reported as one clear line."""


class ProvmapWarning(UserWarning):
    """Something the user should hear once that does not stop the work (a graph output whose
    declared shape the backend's result contradicts); the CLI prints it as one line."""


def describe_node(index: int, node) -> str:
    """`ONNX node #3 'fc' (Gemm)`; an op outside the onnx domains names its domain too
    (`(com.microsoft QGemm)`): the same op name can mean different ops in two domains."""
    name = node.name or "<unnamed>"
    domain = getattr(node, "domain", "") or ""
    op = node.op_type if domain in ("", "ai.onnx") else f"{domain} {node.op_type}"
    return f"ONNX node #{index} '{name}' ({op})"


def first_line(e: BaseException, with_type: bool = False, limit: int = 400) -> str:
    """The one line of a library's exception worth showing a user.

    Libraries disagree on where the point is: ours and ONNX Runtime's put it first; TVM's FFI
    errors start with a traceback and end with the message; OpenVINO (and some of TVM) write
    "Exception from ...:" and the point on the next line.  Every layer that turns a backend's
    failure into one line (the CLI, the measuring worker, the backends, the bench) uses this.
    """
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if lines and lines[0].startswith("Traceback"):
        lines = lines[-1:]
    if not lines:
        msg = ""
    elif len(lines) > 1 and lines[0].endswith(":"):
        msg = f"{lines[0]} {lines[1]}"
    else:
        msg = lines[0]
    if with_type:
        msg = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    return (msg or type(e).__name__)[:limit]


def did_you_mean(word: str, known, n: int = 3) -> str:
    """`; did you mean 'a' or 'b'?` for the names in `known` close to `word`, else "": a typo
    in a model, backend, node or kernel name should cost one glance, not a list read through."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=n, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
