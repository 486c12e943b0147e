"""Backend options declared with their types and ranges, checked before any work (issue 36).

A value that only failed when it was used used to change where the model ran:
`openvino.threads=abc` made OpenVINO's support query fail, so greedy put every node on TVM with
exit 0, and `onnxruntime.optimization=foo` failed only during the build.  Each backend now
declares its options as a table (`Backend.OPTIONS`); `Backend.__init__` checks every value
against it, so the CLI, `NAME[OPTION=VALUE]` variants, the Python API and a manifest read by
`run` all refuse the same values with the same line.  Values are kept as given (the artifact
and the cost cache record them as written), except a choice's, which is stored in the table's
spelling (`canonical`); backends convert them where they use them.
"""

from __future__ import annotations

from dataclasses import dataclass

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
#: No backend takes more threads than this; a larger number is a typo, not a machine.
MAX_THREADS = 4096


@dataclass(frozen=True)
class Option:
    """One option: `kind` is "int", "bool", "choice", "str" or "ops" (a list of ONNX op types,
    checked against the model by partition/backend_options.check_op_lists)."""

    name: str
    kind: str
    help: str
    choices: tuple = ()
    minimum: int | None = None
    maximum: int | None = None

    def expected(self) -> str:
        if self.kind == "int":
            lo = "" if self.minimum is None else f" >= {self.minimum}"
            hi = "" if self.maximum is None else f" and <= {self.maximum}"
            return f"an integer{lo}{hi}"
        if self.kind == "bool":
            return "a boolean (" + "/".join(_TRUE[1:2] + _FALSE[1:2]) + ", 1/0, yes/no, on/off)"
        if self.kind == "choice":
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.kind == "ops":
            return "a comma-separated list of ONNX op types"
        return "a non-empty string"

    def problem(self, value) -> str | None:
        """None when `value` is acceptable, else what was expected."""
        ok = True
        if self.kind == "int":
            ok = as_int(value) is not None
            if ok:
                n = as_int(value)
                ok = (self.minimum is None or n >= self.minimum) and \
                     (self.maximum is None or n <= self.maximum)
        elif self.kind == "bool":
            ok = as_bool(value) is not None
        elif self.kind == "choice":
            ok = str(value).strip().lower() in [str(c).lower() for c in self.choices] \
                if isinstance(value, (str, int)) and not isinstance(value, bool) else False
        elif self.kind == "ops":
            ok = isinstance(value, (list, tuple)) and all(isinstance(x, str) and x for x in value)
        else:
            ok = isinstance(value, str) and bool(value.strip())
        return None if ok else self.expected()


def canonical(spec: Option | None, value):
    """A choice's value in the table's own spelling (`F32` -> `f32`, `ALL` -> `all`): the check
    is case-insensitive, the libraries are not, so `openvino.precision=F32` passed the check and
    failed in the build, and `onnxruntime.optimization=ALL` was stored as given (issue 36).
    A free string loses its surrounding spaces: `tvm.mcpu= native` passed the check, was
    recorded as " native" and LLVM, knowing no such CPU, built generic code (the thirteenth
    afternoon).  Every other value is returned as it is."""
    if spec is not None and spec.kind == "str" and isinstance(value, str):
        return value.strip()
    if spec is None or spec.kind != "choice" or not isinstance(value, str):
        return value
    for c in spec.choices:
        if str(c).lower() == value.strip().lower():
            return c
    return value


def as_int(value) -> int | None:
    """An int from an int or a decimal string of ASCII digits ("4"), else None (no floats, no
    bools; `threads=٣`, an Arabic-Indic digit, passed str.isdigit and was stored raw)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.strip().lstrip("+-").isdigit() \
            and len(value.strip()) < 20:
        return int(value.strip())
    return None


def as_bool(value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        return True if v in _TRUE else False if v in _FALSE else None
    return None


def threads_option(library_default: str) -> Option:
    return Option("threads", "int", f"worker threads (0: {library_default})", minimum=0,
                  maximum=MAX_THREADS)
