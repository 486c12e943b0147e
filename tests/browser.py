"""The headless browser the report tests render pages in (.ci/run installs Debian's chromium)."""

from __future__ import annotations

import shutil

import pytest


def chromium() -> str:
    for exe in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(exe)
        if path:
            return path
    pytest.fail("Chromium is needed for the report test (.ci/run installs Debian's chromium)")
