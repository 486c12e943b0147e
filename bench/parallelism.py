"""What the parallelism gauge reads on this machine: the thresholds' calibration.

    provmap bench parallelism [--minutes 3] [--window-s 10] [-o OUT]

Probes every usable CPU's speed (partition/measure/parallelism.py) every 0.1 s for `--minutes`,
and cuts the probes into windows of `--window-s` (a decision's round lasts 5-30 s; the probe
before a search and each wait for quiet last 1 s).  Per window: the share of uneven probes (one
CPU `SLOW_RATIO` times slower than another), and whether the gauge would call it contended.  Run
quiet, it says how often the gauge would re-measure a round for nothing; run beside whatever
slows a CPU, that it sees it.  Its record: OUT/parallelism/<host>.json and .md (records.py).
"""

from __future__ import annotations

import json
import time

EVERY_S = 0.1


def probe(minutes: float, say=print) -> list[tuple[float, float]]:
    """(seconds since start, unevenness) every EVERY_S for `minutes`."""
    from provmap.partition.measure.parallelism import cpu_times, unevenness

    out, t0 = [], time.monotonic()
    while time.monotonic() - t0 < minutes * 60:
        out.append((time.monotonic() - t0, unevenness(cpu_times())))
        time.sleep(EVERY_S)
        if len(out) % 600 == 0:
            say(f"{time.strftime('%H:%M:%S')} {len(out)} probes")
    return out


def windows(probes: list, window_s: float) -> list[dict]:
    from provmap.partition.measure.parallelism import Gauge

    out: dict[int, Gauge] = {}
    for t, r in probes:
        out.setdefault(int(t // window_s), Gauge()).ratios.append(r)
    return [{"window": k, **g.to_dict(), "contended": g.reason() is not None}
            for k, g in sorted(out.items())]


def summary(probes: list, window_s: float) -> dict:
    from provmap.partition.measure import parallelism as par
    from provmap.runtime_module.backend import percentile

    ratios = [r for _, r in probes]
    res = {"probes": len(probes), "every_s": EVERY_S, "slow_ratio": par.SLOW_RATIO,
           "uneven_share_max": par.UNEVEN_SHARE_MAX,
           "uneven_share": round(sum(r >= par.SLOW_RATIO for r in ratios) / len(ratios), 4),
           "ratio": {q: round(percentile(ratios, p), 3)
                     for q, p in (("p50", .5), ("p90", .9), ("p99", .99), ("max", 1.0))}}
    for w in sorted({1.0, window_s}):
        ws = windows(probes, w)
        shares = [x["uneven"] / x["probes"] for x in ws]
        res[f"windows_{w:g}s"] = {
            "windows": len(ws), "contended": sum(x["contended"] for x in ws),
            "share_p50": round(percentile(shares, .5), 3),
            "share_p90": round(percentile(shares, .9), 3),
            "share_max": round(max(shares), 3)}
    return res


def markdown(res: dict) -> str:
    lines = ["# The parallelism gauge on this machine", "",
             f"{res['probes']} probes, one every {res['every_s']} s (`provmap bench "
             f"parallelism`); uneven = one CPU {res['slow_ratio']}x slower than another on the "
             f"same loop: {res['uneven_share']:.1%} of probes; unevenness p50 "
             f"{res['ratio']['p50']}, p90 {res['ratio']['p90']}, p99 {res['ratio']['p99']}, "
             f"max {res['ratio']['max']}.", "",
             "| window | windows | judged contended (uneven share over "
             f"{res['uneven_share_max']}) | uneven share p50 | p90 | max |",
             "|---|---:|---:|---:|---:|---:|"]
    for k, w in res.items():
        if k.startswith("windows_"):
            lines.append(f"| {k[8:]} | {w['windows']} | {w['contended']} | {w['share_p50']} | "
                         f"{w['share_p90']} | {w['share_max']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from .records import write_record
    from .steps import parser

    ap = parser("parallelism", __doc__, raw=True)
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--window-s", type=float, default=10.0)
    a = ap.parse_args(argv)
    probes = probe(a.minutes)
    res = {"date": time.strftime("%Y-%m-%d"), "started": time.strftime("%H:%M:%S"),
           **summary(probes, a.window_s)}
    write_record("parallelism", a.output, res, markdown(res))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
