"""Every shell block of README.md and docs/*.md runs as a user pastes it.

A block is a fenced `console`, `sh`, `bash` or `shell` block. It runs through `bash` in a
fresh directory (`uv run` finds this project through `UV_PROJECT`, as it would from the
checkout), one command after another as a pasted block runs: a failing command does not
stop the next. A command may fail only if its line says so (`# exit 1`), and then with
that code; anything it started in the background is stopped when the block ends.

A block that cannot run here says why in the comment line just above it, which a reader
sees too:

- `<!-- docs-test: slow: REASON -->` runs with the slow tests (`-m slow`): it runs for
  minutes;
- `<!-- docs-test: skip: REASON -->` never runs here: it needs a cluster, a deployment or a
  browser, or it is a transcript (`$ ` prompts and what they printed).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(?:console|sh|bash|shell)\n(.*?)^```", re.M | re.S)
MARK = re.compile(r"<!-- docs-test: (skip|slow): (.+?) -->")
EXPECTED_EXIT = re.compile(r"#\s*exit (\d+)")
# Printed by the ERR trap the block runs under: the code and the command that failed.
FAILED = re.compile(r"^docs-test: exit (\d+) from: (.*)$", re.M)
# Commands that change a project: run here, under UV_PROJECT, they would change this one.
CHANGES_A_PROJECT = re.compile(r"\b(uv (add|remove|sync|lock|init)|pip install)\b")
BLOCK_TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    text: str
    mark: tuple[str, str] | None  # (skip | slow, the reason)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in BLOCK.finditer(text):
            before = text[: block.start()].rstrip("\n").rpartition("\n")[2]
            mark = MARK.fullmatch(before.strip())
            found.append(
                Block(
                    page=str(page.relative_to(ROOT)),
                    line=text.count("\n", 0, block.start()) + 1,
                    text=block.group(1),
                    mark=(mark.group(1), mark.group(2)) if mark else None,
                )
            )
    return found


BLOCKS = _blocks()


def _param(block: Block) -> object:
    if block.mark is None:
        return pytest.param(block, id=block.id)
    kind, reason = block.mark
    mark = pytest.mark.slow if kind == "slow" else pytest.mark.skip(reason=reason)
    return pytest.param(block, id=block.id, marks=mark)


def _normal(command: str) -> str:
    """`command` without its comment, continuation backslashes and repeated spaces."""
    return " ".join(command.split("#", 1)[0].replace("\\\n", " ").split())


def _expected_failures(block: Block) -> dict[str, int]:
    """Each command the block says fails, with its code (`# exit N` on its line)."""
    return {
        _normal(line): int(code.group(1))
        for line in block.text.splitlines()
        if (code := EXPECTED_EXIT.search(line)) and int(code.group(1)) != 0
    }


@pytest.mark.parametrize("block", [_param(block) for block in BLOCKS])
def test_the_block_runs_as_pasted(block: Block, tmp_path: Path) -> None:
    assert not block.text.startswith("$ "), (
        f"{block.id} is a transcript: mark it `<!-- docs-test: skip: REASON -->`"
    )
    assert not CHANGES_A_PROJECT.search(block.text), (
        f"{block.id} installs or syncs a project: mark it `<!-- docs-test: skip: REASON -->`"
    )
    script = "trap 'echo \"docs-test: exit $? from: $BASH_COMMAND\" >&2' ERR\n" + block.text
    with _port_lock(block):
        out, err = _run(script, tmp_path)
    failed = {_normal(command): int(code) for code, command in FAILED.findall(err)}
    expected = _expected_failures(block)
    unexpected = {
        command: code
        for command, code in failed.items()
        if not any(command.startswith(e) or e.startswith(command) for e in expected)
    }
    assert not unexpected, f"{block.id}: {unexpected}\n{err[-2000:]}"
    for command, code in expected.items():
        got = [c for f, c in failed.items() if f.startswith(command) or command.startswith(f)]
        why = f"{block.id}: {command!r} should exit {code}, got {got}\n{err[-2000:]}"
        assert got == [code], why
    assert "Traceback" not in out + err, err[-2000:]


@contextlib.contextmanager
def _port_lock(block: Block) -> Iterator[None]:
    """Hold a machine-wide lock while a block that serves on a fixed port runs, so two test
    runs on one machine take turns instead of colliding on the port."""
    ports = sorted(set(re.findall(r"--port (\d+)", block.text)))
    if not ports:
        yield
        return
    with open(Path(tempfile.gettempdir()) / f"quiesce-docs-port-{ports[0]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(script: str, cwd: Path) -> tuple[str, str]:
    """Run `script` with bash in `cwd`; stop whatever it left running; its stdout, stderr."""
    env = {**os.environ, "UV_PROJECT": str(ROOT), "UV_NO_SYNC": "1"}
    process = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: background servers stop with it
    )
    try:
        out, err = process.communicate(timeout=BLOCK_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):  # nothing left in the group
            os.killpg(process.pid, signal.SIGTERM)
    return out, err


def test_every_mark_names_a_reason_and_sits_on_a_block() -> None:
    marked = sum(block.mark is not None for block in BLOCKS)
    written = sum(len(MARK.findall(page.read_text(encoding="utf-8"))) for page in PAGES)
    assert marked == written, "a docs-test mark is not right above a block"
    assert all(len(block.mark[1]) > 10 for block in BLOCKS if block.mark), "say why"
