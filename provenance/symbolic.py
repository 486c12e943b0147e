"""Symbolic dimensions kept through the Relax import.

TVM's ONNX frontend knows a dimension only while Relax's own shape rules carry it: at the first
Range over a Shape (every transformer export's position ids), a computed Reshape or a broadcast
of two unrelated symbols, it mints a fresh variable (`range_len_0`) or drops the shape
altogether (`R.Tensor(ndim=3)`).  Everything downstream then fails to legalize ("emit_te now only
supports Tensor that has ShapeExpr shape"), so a dynamic model mapped almost nothing.  ONNX
Runtime's symbolic shape inference relates those tensors to the model's own symbols
(`[batch, seq, 64]`, `[batch*seq, 192]`); the importer states that relation to Relax with a
`match_cast`, which the VM checks at run time, so a wrong relation is an error, never a wrong
value.

Dimensions are read by a small parser of what the inference writes (integers, symbols, `+ - *`,
`//`, `floor(a/b)`, `Max`/`Min`), never by eval: the text comes from the user's file.
"""

from __future__ import annotations

import ast

import onnx
import tvm
import tvm.tirx.analysis  # noqa: F401  (undefined_vars)
from tvm import relax, tirx


def open_input_symbols(model: onnx.ModelProto) -> bool:
    """Whether some graph input keeps a named dimension (the import then needs the relations)."""
    for vi in model.graph.input:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            if any(d.dim_param and not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
                return True
    return False


def input_symbols(params) -> dict[str, tirx.Var]:
    """The TIR variables the frontend made for the graph inputs' named dimensions."""
    out: dict[str, tirx.Var] = {}
    for p in params:
        shape = getattr(getattr(p, "ty", None), "shape", None)
        if isinstance(shape, relax.ShapeExpr):
            for v in shape.values:
                if isinstance(v, tirx.Var):
                    out.setdefault(v.name, v)
    return out


_MAX_TEXT = 200  # a dimension's expression longer than this is not one the inference writes


def parse_dim(text: str, env: dict[str, tirx.Var]):
    """`text` as a TIR expression over `env`'s variables, or None when it names anything else."""
    if len(text) > _MAX_TEXT:
        return None
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None
    try:
        return _expr(tree.body, env)
    except (KeyError, TypeError, ValueError, RecursionError):
        return None


def _expr(node, env):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return tirx.IntImm("int64", node.value)
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return tirx.IntImm("int64", 0) - _expr(node.operand, env)
    if isinstance(node, ast.BinOp):
        a, b = _expr(node.left, env), _expr(node.right, env)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.FloorDiv):
            return tirx.floordiv(a, b)
        raise ValueError("operator")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        name, args = node.func.id, node.args
        if name == "floor" and len(args) == 1 and isinstance(args[0], ast.BinOp) and \
                isinstance(args[0].op, ast.Div):
            return tirx.floordiv(_expr(args[0].left, env), _expr(args[0].right, env))
        if name in ("Max", "Min") and len(args) >= 2:
            vals = [_expr(a, env) for a in args]
            out = vals[0]
            for v in vals[1:]:
                out = tirx.max(out, v) if name == "Max" else tirx.min(out, v)
            return out
    raise ValueError("unsupported")


_TEXT_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "FloorDiv": "//", "FloorMod": "%"}


def dim_text(e, symbols: set, depth: int = 0) -> str | None:
    """A dimension as the user reads it (`past + 1`, `seq * 2`), the inverse of parse_dim, or
    None when it names a variable outside `symbols` (one the import minted: data decides)."""
    if depth > 16:
        return None
    if isinstance(e, tirx.IntImm):
        return str(int(e.value))
    if isinstance(e, tirx.Var):
        return e.name if e.name in symbols else None
    op = _TEXT_OPS.get(type(e).__name__)
    if op is not None:
        a, b = dim_text(e.a, symbols, depth + 1), dim_text(e.b, symbols, depth + 1)
        if a is None or b is None:
            return None
        wrap = lambda t, x: f"({t})" if isinstance(x, (tirx.Add, tirx.Sub)) and op != "+" else t  # noqa: E731
        return f"{wrap(a, e.a)} {op} {wrap(b, e.b)}"
    if type(e).__name__ in ("Max", "Min"):
        a, b = dim_text(e.a, symbols, depth + 1), dim_text(e.b, symbols, depth + 1)
        return None if a is None or b is None else f"{type(e).__name__}({a}, {b})"
    return None


def wanted_shape(tp: onnx.TypeProto | None, ndim: int, env: dict) -> list | None:
    """The shape `tp` gives, as TIR over `env`, when every dimension is known and the rank is
    `ndim`; None otherwise."""
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    dims = tp.tensor_type.shape.dim
    if len(dims) != ndim:
        return None
    out = []
    for d in dims:
        if d.HasField("dim_value"):
            out.append(tirx.IntImm("int64", d.dim_value))
        elif d.dim_param:
            e = parse_dim(d.dim_param, env)
            if e is None:
                return None
            out.append(e)
        else:
            return None
    return out


def _needs(ty, known: set) -> bool:
    """A tensor whose shape Relax lost (unknown) or wrote in variables no input defines."""
    if not isinstance(ty, relax.TensorType) or ty.ndim < 0:
        return False
    if not isinstance(ty.shape, relax.ShapeExpr):
        return True
    return any(x not in known for v in ty.shape.values for x in tirx.analysis.undefined_vars(v))


def refine(bb: relax.BlockBuilder, value, tp, env: dict):
    """`value`, or a match_cast of it to the shape ONNX Runtime's inference relates to the
    inputs, when Relax lost that relation; the cast is a binding of the node being converted."""
    ty = getattr(value, "ty", None)
    if not isinstance(value, relax.Var) or not _needs(ty, set(env.values())):
        return value
    shape = wanted_shape(tp, ty.ndim, env)
    if shape is None:
        return value
    return bb.match_cast(value, relax.TensorType(shape, ty.dtype))
