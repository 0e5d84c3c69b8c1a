"""The text and number types: what each refuses, and the one-line hint for unknown names."""

from __future__ import annotations

import math

import click
import pytest

from quiesce.cli._output import abbreviated
from quiesce.cli._values import (
    FiniteFloatRange,
    HttpUrl,
    Name,
    Setting,
    ShellCommand,
    unknown_name,
)
from quiesce.mutants import MUTANTS


def refusal(kind: click.ParamType, value: str) -> str:
    with pytest.raises(click.BadParameter) as caught:
        kind.convert(value, None, None)
    return caught.value.message


def test_name() -> None:
    assert Name().convert("agent-0", None, None) == "agent-0"
    assert (
        Name().convert("checkpoint:idle:trigger.retarget=stopped", None, None).endswith("stopped")
    )
    for mutant in MUTANTS.values():  # every mutant name is taken as typed (`--mutant NAME`)
        assert Name().convert(mutant.name, None, None) == mutant.name
    assert refusal(Name(), "") == "an empty name"
    assert "longer than 200 characters" in refusal(Name(), "x" * 201)
    assert "spaces or control characters" in refusal(Name(), "a\x00b")
    assert "spaces or control characters" in refusal(Name(), "two words")


@pytest.mark.parametrize(
    "url", ["", "127.0.0.1:8700", "ftp://host", "http://", "http://h:port", "http://a\x01b"]
)
def test_http_url_refuses(url: str) -> None:
    assert "e.g. http://127.0.0.1:8700" in refusal(HttpUrl(), url)


def test_http_url_accepts() -> None:
    for url in ("http://127.0.0.1:8700", "https://policy.example/base"):
        assert HttpUrl().convert(url, None, None) == url


def test_setting() -> None:
    assert Setting().convert(" rms = 3 ", None, None) == ("rms", "3")
    assert Setting().convert("rms=", None, None) == ("rms", "")  # the model says what it needs
    assert "is not KEY=VALUE (e.g. rms=3)" in refusal(Setting(), "rms")
    assert "is not KEY=VALUE" in refusal(Setting(), "=3")
    assert "is not a short KEY=VALUE" in refusal(Setting(), "rms=\t")
    assert "is not a short KEY=VALUE" in refusal(Setting(), "rms=" + "9" * 500)


def test_finite_float_range_refuses_what_slips_past_float_range() -> None:
    assert FiniteFloatRange(0, 1).convert("0.5", None, None) == 0.5
    assert math.isnan(click.FloatRange(0, 1).convert("nan", None, None))  # passes its bounds
    assert refusal(FiniteFloatRange(0, 1), "nan") == "nan is not a finite number"
    assert "not in the range" in refusal(FiniteFloatRange(0, 1), "inf")


def test_abbreviated_keeps_short_values_and_cuts_long_ones() -> None:
    assert abbreviated("a\x00b") == "'a\\x00b'"
    cut = abbreviated("x" * 5_000)
    assert len(cut) < 140 and cut.endswith("(5,000 chars)")


def test_unknown_name_lists_few_names_and_suggests_among_many() -> None:
    assert unknown_name("table", "gat", ["gate", "fence"], "quiesce tables") == (
        "no table named 'gat'; known: gate, fence"
    )
    many = [f"mutant_{i}" for i in range(100)]
    assert unknown_name("mutant", "mutant_7x", many, "quiesce mutants --all").startswith(
        "no mutant named 'mutant_7x'; did you mean mutant_7"
    )
    assert unknown_name("mutant", "zzz", many, "quiesce mutants --all") == (
        "no mutant named 'zzz'; `quiesce mutants --all` lists all 100"
    )


def test_shell_command_takes_a_pasted_multi_line_script_and_refuses_other_controls() -> None:
    script = 'kill -9 "$(cat s/.lock)"; flock s/.lock true\n    serve \\\n\t--port 8700 &'
    assert ShellCommand().convert(script, None, None) == script
    for bad in ("a\x00b", "a\x1bb", "echo 'open", " \n"):
        with pytest.raises(click.BadParameter):
            ShellCommand().convert(bad, None, None)
