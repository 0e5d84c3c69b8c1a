"""Headless Chromium for the page tests (the explorer, the run report).

`chromium(profile, url, *args)` runs it once with a fresh profile and returns stdout;
`dump_dom` the DOM the page's script built, `dump_dom_and_console` also what it logged.
Tests skip with `needs_chromium` when no Chromium is installed (CI installs it: .ci/run).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)


def _run(profile: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
        url,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)


def chromium(profile: Path, url: str, *args: str) -> str:
    """Chromium's stdout for `url`, headless, offline-minded, in a fresh `profile` dir."""
    return _run(profile, url, *args).stdout


def dump_dom(profile: Path, url: str) -> str:
    """The DOM after the page's script ran (and 5 s of virtual time for its requests)."""
    return chromium(profile, url, "--virtual-time-budget=5000", "--dump-dom")


def dump_dom_and_console(profile: Path, url: str, *args: str) -> tuple[str, list[str]]:
    """The DOM, and every console message the page logged (uncaught errors included);
    `args` go to Chromium too (`--window-size=W,H`)."""
    flags = ("--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0", "--dump-dom")
    ran = _run(profile, url, *flags, *args)
    console = [line for line in ran.stderr.splitlines() if ":CONSOLE" in line]
    return ran.stdout, console
