"""docs/adopting.md runs: every ```python block is verbatim in the file its title names
(code the suite runs: examples/ through tests/examples/, and those tests themselves), and
every ```console block runs.

Console blocks: the install commands run with `/path/to/quiesce` replaced by this checkout
and the git URL by this checkout's repository (`git+file://`), each in a new `uv init`
project (`pip install` into a new virtualenv: slow, opt-in); `uv run pytest tests/examples`
names tests this suite runs (in the same CI job), which is checked here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "adopting.md"
_FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
_TITLED = re.compile(r'python title="(?P<path>[^"]+)"')
GIT_URL = "git+https://github.com/you/quiesce"
SOURCE = "/path/to/quiesce"
IMPORT_CHECK = "import quiesce.adapters as a; print(a.participant_lifespan.__name__)"


def _blocks(kind: str) -> list[tuple[str, str]]:
    """`(info, body)` of every block whose info starts with `kind`."""
    text = GUIDE.read_text()
    return [
        (m["info"].strip(), m["body"]) for m in _FENCE.finditer(text) if m["info"].startswith(kind)
    ]


def _verbatim_in(block: str, source: str) -> bool:
    """Whether `block`'s lines appear, in order and consecutive, in `source`."""
    want = block.rstrip("\n").splitlines()
    lines = source.splitlines()
    return any(lines[i : i + len(want)] == want for i in range(len(lines) - len(want) + 1))


def test_the_guide_uses_public_names_only() -> None:
    assert not re.search(r"quiesce(\.\w+)*\._", GUIDE.read_text()), "a private module"
    for example in sorted((REPO / "examples").glob("*.py")):
        text = example.read_text()
        assert not re.search(r"(from|import) quiesce(\.\w+)*\._", text), example.name


def test_every_python_block_is_verbatim_in_the_file_it_names() -> None:
    blocks = _blocks("python")
    assert len(blocks) >= 8
    for info, body in blocks:
        titled = _TITLED.fullmatch(info)
        assert titled, f"fence {info!r}: every python block names its file (title=...)"
        source = REPO / titled["path"]
        assert source.is_file(), f"{info}: no such file"
        assert _verbatim_in(body, source.read_text()), f"{info}: block not in the file:\n{body}"


def _console_lines() -> list[str]:
    lines = [
        line.strip()
        for _info, body in _blocks("console")
        for line in body.splitlines()
        if line.strip()
    ]
    assert lines, "the guide shows how to install and how to run the checks"
    return lines


def _run(command: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT")}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"
    return done.stdout


def _new_project(tmp_path: Path, uv: str) -> Path:
    project = tmp_path / "my-service"
    project.mkdir(parents=True)
    _run([uv, "init", "-q", "--bare", "--name", "my-service", "--python", "3.11"], project)
    return project


@pytest.mark.timeout(300)
def test_the_uv_install_commands_run(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed here (CI installs it)")
    installs = [line for line in _console_lines() if line.startswith("uv add")]
    assert len(installs) == 2, installs
    for number, line in enumerate(installs):
        command = line.replace(SOURCE, str(REPO)).replace(GIT_URL, f"git+file://{REPO}")
        project = _new_project(tmp_path / str(number), uv)
        _run([uv, *shlex.split(command)[1:]], project)
        python = project / ".venv" / "bin" / "python"  # `uv add` installed it there
        imported = _run([str(python), "-c", IMPORT_CHECK], project)
        assert imported.strip() == "participant_lifespan", line


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_pip_install_command_runs(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed here (it makes the virtualenv)")
    (line,) = [line for line in _console_lines() if line.startswith("pip install")]
    _run([uv, "venv", "-q", "--seed", "--python", "3.11", str(tmp_path / "venv")], tmp_path)
    pip = tmp_path / "venv" / "bin" / "pip"
    _run([str(pip), *shlex.split(line.replace(SOURCE, str(REPO)))[1:]], tmp_path)
    python = tmp_path / "venv" / "bin" / "python"
    assert _run([str(python), "-c", IMPORT_CHECK], tmp_path).strip() == "participant_lifespan"


def test_the_pytest_command_names_checks_this_suite_runs() -> None:
    # Running them again here would double their cost: the suite runs them in this job.
    (line,) = [line for line in _console_lines() if line.startswith("uv run pytest")]
    (path,) = line.split()[3:]
    assert Path(path).parts[0] == "tests", "inside the suite's testpaths (pyproject.toml)"
    defined = "".join(test.read_text() for test in (REPO / path).glob("test_*.py"))
    assert "def test_the_agent_service_conforms" in defined
    assert "def test_checkpoint_crash_restore_in_a_ray_actor" in defined


def test_the_readme_links_the_guide() -> None:
    assert "(docs/adopting.md)" in (REPO / "README.md").read_text()
