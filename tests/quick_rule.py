"""The one comparison procedure's rule, shortened for tests that run a search on a tiny model
to check plumbing, not speed: one round of six short passes (partition/decision.py decides the
same way, on less evidence)."""

from provmap.partition.measure.evidence import Rule

QUICK_RULE = Rule(max_passes=6, block_s=0.05)
