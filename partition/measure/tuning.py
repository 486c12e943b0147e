"""What tuning backends did while the search was priced, and how that is told.

A backend that tunes what it builds (tvm tune=metaschedule) reports per measured region how many
tasks it tuned, found in its database or left untuned, and, when it prepared every region up
front (`Backend.prepare`), the same for that session.  The measuring estimator only adds these
up; what they mean to a user (the stderr of a search and of `provmap compile`) is said here, in
one place, apart from how candidates are measured.
"""

from __future__ import annotations


class TuningTally:
    """The sum of the tuning reports, as `MeasuredEstimator.stats()["tuning"]` shows it.

    Not thread-safe by itself: the estimator adds under its own lock (prefetch measures on
    threads)."""

    def __init__(self):
        self.counts = {"regions": 0, "tasks": 0, "tuned": 0, "reused": 0, "untuned": 0,
                       "trials": 0, "tuning_s": 0.0, "foreign_records": 0, "db": ""}

    def add_region(self, t: dict) -> None:
        """One measured region's report (a worker's result["tuning"])."""
        agg = self.counts
        agg["regions"] += 1
        for k in ("tasks", "tuned", "reused", "untuned", "trials", "tuning_s"):
            agg[k] += t.get(k) or 0
        agg["foreign_records"] = max(agg["foreign_records"], t.get("foreign_records") or 0)
        if t.get("db"):
            agg["db"] = t["db"]

    def add_up_front(self, report: dict) -> None:
        """A backend's `prepare` report, when it tuned anything; kept whole as "up_front"."""
        if not (report.get("trials") or report.get("tasks")):
            return
        agg = self.counts
        agg["tuned"] += report.get("tuned") or 0
        agg["trials"] += report.get("trials") or 0
        agg["tuning_s"] += report.get("tuning_s") or 0.0
        agg["up_front"] = {k: report.get(k) for k in
                           ("regions", "tasks", "tuned", "reused", "untuned",
                            "trials", "tuning_s")}
        if report.get("db"):
            agg["db"] = report["db"]

    def report(self) -> dict | None:
        """The tally, or None when nothing was tuned nor prepared."""
        if self.counts["regions"] or "up_front" in self.counts:
            return dict(self.counts)
        return None


def backends_tune(backends) -> bool:
    """Whether a backend among `backends` tunes what it builds (tvm tune=metaschedule)."""
    return any(str(b.options().get("tune", "none")) not in ("none", "") for b in backends)


def tuning_summary(tun: dict | None) -> list[str]:
    """The search's TVM tuning in words (the stderr of a search and `provmap compile` both)."""
    if not tun:
        return []
    lines = []
    up = tun.get("up_front")
    if up:
        lines.append(f"tvm tuning up front: {up['tasks']} distinct task(s) of {up['regions']} "
                     f"region(s), tuned {up['tuned']}, from the database {up['reused']}, left "
                     f"untuned by the budget {up['untuned']} ({up['trials']} trials, "
                     f"{up['tuning_s']:.0f} s)")
    lines.append(f"tvm tuning in all: tuned {tun['tuned']} task(s) ({tun['trials']} trials, "
                 f"{tun['tuning_s']:.0f} s); the {tun['regions']} measured region(s) hold "
                 f"{tun['tasks']} task(s): from the database {tun['reused']}, left untuned by "
                 f"the budget {tun['untuned']}"
                 + (f"; {tun['foreign_records']} record(s) in {tun['db']}'s directory are for "
                    "another host or TVM version and were not used"
                    if tun.get("foreign_records") else ""))
    return lines
