"""What `quiesce --help` and a command's start-up import: nothing they do not need.

Each check runs in a fresh interpreter (this process has imported everything already) and
reads `sys.modules` after the import or the command. How fast that is, is measured as a
ratio in `benchmarks/bench_startup.py`; here only *what* is imported is checked.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import click
import pytest

# Imported by the stateful tests only (hypothesis pulls pytest in through trio.testing).
TEST_TOOLS = ("hypothesis", "pytest", "_pytest", "trio.testing")


def _modules_after(code: str) -> set[str]:
    """The modules loaded once `code` ran in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.__stderr__)"
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    return set(json.loads(ran.stderr.strip().splitlines()[-1]))


def _help(*args: str) -> str:
    return (
        "from quiesce.cli import main\n"
        "try:\n"
        f"    main([{', '.join(repr(a) for a in (*args, '--help'))}])\n"
        "except SystemExit:\n"
        "    pass"
    )


def test_help_imports_no_command_and_no_test_tool() -> None:
    loaded = _modules_after(_help())
    assert not [m for m in loaded if m.startswith("quiesce.cli._")], "a command was imported"
    assert not set(TEST_TOOLS) & loaded
    assert "pydantic" not in loaded, "quiesce.fsm imports pydantic before a diagram is drawn"
    assert "quiesce.models" not in loaded and "quiesce.protocol" not in loaded


def test_the_engine_loads_pydantic_only_for_a_diagram() -> None:
    assert "pydantic" not in _modules_after("from quiesce.fsm import Table, on, QuiesceError")
    assert "pydantic" in _modules_after("from quiesce.fsm import render_mermaid")


@pytest.mark.parametrize("command", ["simulate", "check", "mutants", "diagram", "validate"])
def test_a_command_that_runs_no_stateful_test_imports_no_test_tool(command: str) -> None:
    loaded = _modules_after(_help(command))
    assert f"quiesce.cli._{command}" in loaded
    assert not set(TEST_TOOLS) & loaded, sorted(set(TEST_TOOLS) & loaded)


def test_simulate_imports_neither_http_nor_the_model_checker() -> None:
    loaded = _modules_after(_help("simulate"))
    assert not {"httpx", "starlette", "uvicorn", "yaml"} & loaded
    assert not {"quiesce.mutants._catalog", "quiesce.models.coverage._swarm"} & loaded


def test_the_stateful_names_still_load_on_first_use() -> None:
    loaded = _modules_after("from quiesce.models import SystemMachine")
    assert "hypothesis" in loaded


def test_help_lists_each_command_with_its_own_summary() -> None:
    # `quiesce --help` lists the summaries `quiesce.cli` keeps beside each command's module:
    # each must be the command's own (its docstring's first sentence), shown in full.
    from click.testing import CliRunner

    from quiesce.cli import _COMMANDS, main

    ctx = click.Context(main)
    for name, (_, _, summary) in _COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None
        assert command.get_short_help_str(10_000) == summary, name
    listed = CliRunner().invoke(main, ["--help"], terminal_width=400).stdout
    for name, (_, _, summary) in _COMMANDS.items():
        assert re.search(rf"^  {name} +{re.escape(summary)}$", listed, re.M), name
