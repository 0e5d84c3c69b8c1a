"""Every option of every command, given hostile values: a short error, never a traceback.

The test walks `quiesce.cli.main`'s click tree, so a new command or option is covered (or
fails `test_every_parameter_has_a_checked_type`) without editing this file. Each parameter
gets values hostile to its type -- fixed ones (nonexistent, unwritable, directory instead
of file, non-UTF-8, empty, NaN...) and more drawn by hypothesis -- one parameter at a time,
from a fast baseline of its command:

- a value outside the parameter's declared domain must exit 2 with a short error
  (< 500 characters), before the command does any work;
- a value inside it (any integer for a seed) must behave like the baseline;
- no Python traceback, either way.

The declared domain is the contract `test_every_parameter_has_a_checked_type` enforces:
paths use `quiesce.cli._paths`, text `quiesce.cli._values`, numbers a range bounded on
both sides (a plain `int` means every integer is valid), floats `FiniteFloatRange`.
Nothing starts for real: `serve` is given a port that is already taken, and `chaos` and
`conform` stop at a stub where they would start processes or dial a server.
"""

from __future__ import annotations

import errno
import math
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiesce.adapters import FileFenceLog
from quiesce.cli import _chaos, _conform, _cover, _explore, main
from quiesce.cli._paths import InputFile, OutputDir, OutputFile
from quiesce.cli._values import FiniteFloatRange, HttpUrl, Name, Setting, ShellCommand
from quiesce.harness import ChaosError
from quiesce.models import RefinementUnsupported
from quiesce.testing import ConformanceSetupError

HUGE = 10**15
"""Larger than any bound a count may have: a "huge" value must be refused."""

MAX_ERROR = 500
"""Longest acceptable output of a refused value (a usage line and one error line)."""

STUB = "not started by the hostile-argument test"


def _commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(main)
    found: list[tuple[str, click.Command]] = [("", main)]
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert command is not None, name
        found.append((name, command))
    return found


PARAMS = [
    (name, param)
    for name, command in _commands()
    for param in command.get_params(click.Context(command))
]


def _param_id(command: str, param: click.Parameter) -> str:
    return f"{command or 'quiesce'}:{param.name}"


def _cases() -> Iterator[Any]:
    for command, param in PARAMS:
        yield pytest.param(command, param, id=_param_id(command, param))


# ------------------------------------------------------------------ the declared domain


def _family(param: click.Parameter) -> str:
    """Which hostile values fit `param`, or `AssertionError` if its type checks too little."""
    kind = param.type
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    if isinstance(kind, InputFile | OutputFile | OutputDir):
        return "path"
    if isinstance(kind, Name | HttpUrl | Setting | ShellCommand):
        return "text"
    if isinstance(kind, click.Choice):
        return "choice"
    if isinstance(kind, click.IntRange):
        assert kind.min is not None and kind.max is not None and kind.max < HUGE, (
            f"{param.name}: bound both ends of IntRange({kind.min}, {kind.max}) "
            f"(a huge value would start an endless run)"
        )
        return "int"
    if kind is click.INT:
        return "int"  # every integer is valid (a seed)
    if isinstance(kind, FiniteFloatRange):
        assert kind.min is not None and kind.max is not None, f"{param.name}: bound both ends"
        return "float"
    raise AssertionError(
        f"{param.name} has type {type(kind).__name__}: use a checked type "
        "(quiesce.cli._paths, quiesce.cli._values, a bounded IntRange, FiniteFloatRange)"
    )


def _in_domain(param: click.Parameter, value: str) -> bool:
    """Is `value` a valid value of a number parameter (the run must then work)?"""
    kind = param.type
    try:
        number: float = float(value) if isinstance(kind, click.FloatRange) else int(value)
    except ValueError:
        return False
    if not math.isfinite(number):
        return False
    low = getattr(kind, "min", None)
    high = getattr(kind, "max", None)
    return (low is None or number >= low) and (high is None or number <= high)


@pytest.mark.parametrize(("command", "param"), list(_cases()))
def test_every_parameter_has_a_checked_type(command: str, param: click.Parameter) -> None:
    _family(param)


# ------------------------------------------------------------------ hostile values


@dataclass(frozen=True)
class _Files:
    """Hostile file-system objects, made once for the module."""

    root: Path
    file: Path
    directory: Path
    non_utf8: Path
    empty: Path
    token: Path
    fence_log: Path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> _Files:
    root = tmp_path_factory.mktemp("hostile")
    made = _Files(
        root=root,
        file=root / "a-file",
        directory=root / "a-directory",
        non_utf8=root / "latin1.json",
        empty=root / "empty.json",
        token=root / "token",
        fence_log=root / "fence.jsonl",
    )
    made.file.write_text("not a directory\n")
    made.directory.mkdir()
    made.non_utf8.write_bytes(b"\xff\xfe caf\xe9 \x00")
    made.empty.write_bytes(b"")
    made.token.write_text("hostile-test-token\n")
    FileFenceLog(made.fence_log).close()  # a header and no request: a valid, empty log
    return made


# /proc takes no new files, even from root (chmod cannot make such a place for root).
_UNWRITABLE = Path("/proc/quiesce-hostile")


def _fixed_paths(kind: click.ParamType, files: _Files) -> list[str]:
    # Refused by every path type: empty, longer than the system allows, a NUL byte.
    unusable = ["", str(files.root / ("x" * 5_000)), "a\x00b"]
    if isinstance(kind, InputFile):
        missing = files.root / "missing.json"
        return [
            *unusable,
            str(missing),
            str(files.directory),
            str(files.non_utf8),
            str(files.empty),
        ]
    if isinstance(kind, OutputFile):
        return [
            *unusable,
            str(files.root / "missing" / "out.txt"),
            str(files.file / "out.txt"),
            str(files.directory),
            str(_UNWRITABLE / "out.txt"),
        ]
    assert isinstance(kind, OutputDir)
    return [*unusable, str(files.file), str(files.file / "sub"), str(_UNWRITABLE)]


_CONTROL = st.sampled_from(["\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x7f", "\u2028"])
_TEXT = st.one_of(
    st.just(""),
    st.text(min_size=2_001, max_size=5_000),  # longer than any name or URL may be
    st.builds(lambda a, c, b: a + c + b, st.text(max_size=10), _CONTROL, st.text(max_size=10)),
)
_SHELL_TEXT = st.one_of(
    st.just(""),
    st.text(min_size=2_001, max_size=5_000),
    st.builds(
        lambda a, c, b: a + c + b,
        st.text(max_size=10),
        st.sampled_from(["\x00", "\x01", "\x1b", "\x7f", "\u2028"]),
        st.text(max_size=10),
    ),
)
_NOT_A_NUMBER = st.text(max_size=20).filter(lambda s: not _parses(s))


def _parses(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _hostile(param: click.Parameter, files: _Files) -> tuple[list[str], st.SearchStrategy[str]]:
    """Fixed hostile values (always run) and a strategy drawing more."""
    family = _family(param)
    if family == "flag":
        return ["x", "", "yes"], st.text(max_size=20)
    if family == "path":
        fixed = _fixed_paths(param.type, files)
        return fixed, st.sampled_from(fixed)
    if isinstance(param.type, HttpUrl):
        fixed = ["", "not a url", "ftp://host", "http://", "http://host:port", "http://a\x00b"]
        return fixed, st.one_of(_TEXT, _TEXT.filter(bool).map(lambda junk: f"http://h/{junk}"))
    if isinstance(param.type, Setting):
        fixed = ["", "rms", "=3", "rms=\t", "rms=" + "9" * 5_000]
        return fixed, st.one_of(_TEXT, _TEXT.filter(bool).map(lambda junk: f"rms={junk}"))
    if isinstance(param.type, ShellCommand):
        # A script pasted over several lines is a valid command: newlines and tabs pass.
        fixed = ["", " \n\t", "x" * 5_000, "a\x00b", "a\x1bb", "echo 'unbalanced"]
        return fixed, _SHELL_TEXT
    if family == "text":
        return ["", "x" * 5_000, "a\x00b", "a\nb"], _TEXT
    if family == "choice":
        assert isinstance(param.type, click.Choice)
        choices = {str(c).casefold() for c in param.type.choices}
        unknown = st.text(max_size=30).filter(lambda s: s.casefold() not in choices)
        return ["", "no-such-choice"], unknown
    if family == "int":
        numbers = st.one_of(st.integers(max_value=-1), st.integers(min_value=HUGE))
        return ["-1", str(HUGE), "abc", "1.5", ""], st.one_of(numbers.map(str), _NOT_A_NUMBER)
    numbers = st.one_of(
        st.floats(max_value=-1e-3, allow_nan=False, allow_infinity=False),
        st.floats(min_value=1e20, allow_nan=False, allow_infinity=False),
    )
    fixed = ["-1", "1e300", "nan", "inf", "-inf", "abc"]
    return fixed, st.one_of(numbers.map(str), _NOT_A_NUMBER, st.sampled_from(fixed))


# ------------------------------------------------------------------ baselines


@pytest.fixture(scope="module")
def taken_port() -> Iterator[int]:
    """A port with a listener on it: `serve` fails to bind there instead of serving."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


@dataclass(frozen=True)
class _Baseline:
    options: tuple[str, ...]
    arguments: tuple[str, ...] = ()
    late_failure: str | None = None
    """The error the baseline itself ends with (a stub, a taken port): a refused value
    must be refused before it, so this text must not appear."""


def _baselines(files: _Files, port: int) -> dict[str, _Baseline]:
    token = f"--token-file={files.token}"
    return {
        "": _Baseline(()),
        "simulate": _Baseline(("--steps=1", "--groups-per-step=1", "--group-size=1")),
        "tables": _Baseline(()),
        "diagram": _Baseline((), ("admission_gate",)),
        "diagrams": _Baseline((f"--out-dir={files.root / 'diagrams'}",)),
        "check": _Baseline((), ("two-phase",)),
        "mutants": _Baseline(()),
        "serve": _Baseline(
            ("--role=agent", f"--port={port}", f"--state-dir={files.root / 'state'}", token),
            late_failure="cannot listen on",
        ),
        "conform": _Baseline(
            ("--url=http://127.0.0.1:9", "--role=agent", token), late_failure=STUB
        ),
        "chaos": _Baseline((f"--workdir={files.root / 'chaos'}",), late_failure=STUB),
        "explore": _Baseline((), ("two-phase",), late_failure=STUB),
        "validate": _Baseline((), (str(files.fence_log),)),
        "cover": _Baseline((), late_failure=STUB),
    }


def _baseline_argv(command: str, baseline: _Baseline) -> list[str]:
    if not command:
        return list(baseline.options)
    return [command, *baseline.options, "--", *baseline.arguments]


def _argv(command: str, baseline: _Baseline, param: click.Parameter, value: str) -> list[str]:
    options, arguments = list(baseline.options), list(baseline.arguments)
    if isinstance(param, click.Argument):
        arguments = [value]
    else:
        flag = param.opts[0]
        options = [o for o in options if not o.startswith(f"{flag}=")] + [f"{flag}={value}"]
    if not command:
        return options
    return [command, *options, "--", *arguments]


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a command would start processes, dial a server or serve, it fails instead."""

    def no_chaos(*args: Any, **kwargs: Any) -> Any:
        raise ChaosError(STUB)

    def no_conformance(url: str, *args: Any, **kwargs: Any) -> Any:
        raise ConformanceSetupError(url, STUB)

    def no_serving(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("serve started serving: a hostile value was accepted")

    def no_cover(*args: Any, **kwargs: Any) -> Any:
        raise RefinementUnsupported(STUB)

    def no_page(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EADDRINUSE, STUB)

    monkeypatch.setattr(_chaos, "run_chaos", no_chaos)
    monkeypatch.setattr(_cover, "transition_cover", no_cover)
    monkeypatch.setattr(_explore, "serve", no_page)
    monkeypatch.setattr(_conform, "check_conformance", no_conformance)
    monkeypatch.setattr("uvicorn.Server.run", no_serving)


@dataclass(frozen=True)
class _Ran:
    code: int
    out: str
    err: str


def _run(argv: list[str]) -> _Ran:
    result = CliRunner().invoke(main, argv)
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    assert not crashed, f"{argv!r:.300} raised {result.exception!r:.300}"
    for stream in (result.stdout, result.stderr):
        assert "Traceback" not in stream, f"{argv!r:.300} printed a traceback:\n{stream}"
    return _Ran(result.exit_code, result.stdout, result.stderr)


@pytest.mark.usefixtures("stubs")
def test_every_baseline_is_fast_and_ends_as_expected(files: _Files, taken_port: int) -> None:
    for command, baseline in _baselines(files, taken_port).items():
        ran = _run(_baseline_argv(command, baseline))
        if not command:  # `quiesce` alone: the usage, as a usage error
            assert ran.code == 2 and "Usage: " in ran.out + ran.err, ran
        elif baseline.late_failure is None:
            assert ran.code == 0, (command, ran)
        else:
            assert ran.code == 2 and baseline.late_failure in ran.err, (command, ran)


@pytest.mark.usefixtures("stubs")
@pytest.mark.parametrize(("command", "param"), list(_cases()))
def test_hostile_values_get_a_short_error_and_no_traceback(
    command: str, param: click.Parameter, files: _Files, taken_port: int
) -> None:
    baseline = _baselines(files, taken_port)[command]
    family = _family(param)
    fixed, strategy = _hostile(param, files)

    def attempt(value: str) -> None:
        valid = family in ("int", "float") and _in_domain(param, value)
        if family in ("int", "float", "text", "choice") and not valid:
            # A value the type lets through would start a real (maybe endless) run.
            try:
                param.type.convert(value, param, None)
            except click.BadParameter:
                pass
            else:
                pytest.fail(f"{_param_id(command, param)} accepts {value!r:.80}")
        ran = _run(_argv(command, baseline, param, value))
        shown = f"{_param_id(command, param)} = {value!r:.80}: exit {ran.code}\n{ran.err[:600]}"
        if valid:
            assert ran.code == _run(_baseline_argv(command, baseline)).code, shown
            return
        assert ran.code == 2, shown
        assert len(ran.out) + len(ran.err) < MAX_ERROR, shown
        if baseline.late_failure is not None:
            assert baseline.late_failure not in ran.err, f"refused too late: {shown}"

    for value in fixed:
        attempt(value)

    @settings(
        max_examples=6,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
    )
    @given(strategy)
    def drawn(value: str) -> None:
        attempt(value)

    drawn()


# ------------------------------------------------------------------ real processes


def test_the_reported_tracebacks_are_short_errors_in_a_real_process(tmp_path: Path) -> None:
    """Cases a user measured as tracebacks, run as `python -m quiesce` (the light ones: the
    rest are the same paths, run in-process above)."""
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "latin1.json").write_bytes(b"\xff\xfe")
    under_file = str(tmp_path / "a-file" / "sub")
    cases = [
        ["diagram", "admission_gate", "--out", f"{under_file}/x.mmd"],
        ["diagrams", "--out-dir", under_file],
        ["diagram", "admission_gate", "--trace", str(tmp_path / "latin1.json")],
    ]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "quiesce", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in cases
    ]
    for args, process in zip(cases, processes, strict=True):
        out, err = process.communicate(timeout=120)
        assert process.returncode != 0, args
        assert "Traceback" not in out + err, (args, err)
        assert len(out) + len(err) < MAX_ERROR, (args, err)
