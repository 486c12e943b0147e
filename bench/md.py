"""Markdown cells and tables, shared by the bench records' writers (report.py, search_table.py)."""

from __future__ import annotations


def fmt(x, spec="{:.2f}", none="-"):
    """A number in `spec`, or `none` where the record has no value."""
    return none if x is None else spec.format(x)


def table(intro: str, header: list[str], rows: list[list]) -> list[str]:
    """A blank line, the intro, a blank line, then a Markdown table."""
    def line(cells):
        return "| " + " | ".join(str(c) for c in cells) + " |"

    return ["", intro, "", line(header), "|" + "---|" * len(header), *map(line, rows)]
