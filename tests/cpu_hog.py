"""The contention tests' hog is the bench's (one copy: bench/hog.py)."""

from provmap.bench.hog import cpu_hog  # noqa: F401
