"""results.json -> latency.png: the bench's one chart, beside report.py's tables (matplotlib is
imported only here, and only when a chart is drawn)."""

from __future__ import annotations

import os


def chart(res: dict, path: str | os.PathLike) -> None:
    """Latency per model and strategy, as ratios to the best single backend (log scale: untuned
    TVM sits two orders of magnitude above the others), medians in the labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in res["rows"]))
    strategies = list(dict.fromkeys(r["strategy"] for r in res["rows"]))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(models) * max(1, len(strategies)) / 3), 4.5))
    width = 0.8 / max(1, len(strategies))
    for j, s in enumerate(strategies):
        xs, ys, labels = [], [], []
        for i, m in enumerate(models):
            r = next((r for r in res["rows"] if r["model"] == m and r["strategy"] == s), None)
            if r is None or r.get("ratio_to_best_single") is None:
                continue
            xs.append(i + (j - (len(strategies) - 1) / 2) * width)
            ys.append(r["ratio_to_best_single"])
            labels.append(f"{r['median_ms']:.3g}")
        bars = ax.bar(xs, ys, width, label=s)
        for b, lab in zip(bars, labels):
            ax.annotate(lab, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                        va="bottom", fontsize=6, rotation=90)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("latency / best single backend (log)")
    ax.set_title(f"provmap bench {res['date']} (labels: median ms)")
    ax.legend(fontsize=7, ncols=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)
