"""Text and number options, checked before a command starts.

click's `STRING` takes anything (an empty name, a 5,000-character host, a NUL byte) and
`FloatRange` lets `nan` through every bound; each then fails deep inside a run, often as
a traceback. These types refuse such values as a usage error (exit 2), naming the value
(abbreviated) and what would be accepted.
"""

from __future__ import annotations

import difflib
import math
import shlex
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import click

from quiesce.cli._output import abbreviated

__all__ = [
    "FiniteFloatRange",
    "HttpUrl",
    "Name",
    "Setting",
    "ShellCommand",
    "unknown_name",
    "visible",
]

MAX_NAME = 200
"""Longest name (table, model, mutant, participant, host) any option takes."""

MAX_URL = 2_000

MAX_COMMAND = 2_000
"""Longest shell command (`conform --restart-cmd`) an option takes."""

# The control characters a pasted multi-line shell script legitimately holds.
_SCRIPT_WHITESPACE = frozenset("\n\t\r")


def visible(text: str) -> bool:
    """No whitespace or control character (a NUL or newline breaks logs, headers, sockets)."""
    return text.isprintable() and not any(c.isspace() for c in text)


class Name(click.ParamType[str]):
    """A name: 1 to `MAX_NAME` visible characters (no spaces or control characters)."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text:
            self.fail("an empty name", param, ctx)
        if len(text) > MAX_NAME:
            self.fail(f"{abbreviated(text)} is longer than {MAX_NAME} characters", param, ctx)
        if not visible(text):
            self.fail(f"{abbreviated(text)} has spaces or control characters", param, ctx)
        return text


class HttpUrl(click.ParamType[str]):
    """An `http://` or `https://` URL with a host, e.g. `http://127.0.0.1:8700`."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        example = "e.g. http://127.0.0.1:8700"
        if len(text) > MAX_URL or not visible(text):
            self.fail(f"{abbreviated(text)} is not a URL ({example})", param, ctx)
        try:
            parts = urlsplit(text)
            _ = parts.port  # raises ValueError for a port that is not a number
        except ValueError as error:
            self.fail(f"{abbreviated(text)} is not a URL: {error} ({example})", param, ctx)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            reason = f"is not an http(s) URL with a host ({example})"
            self.fail(f"{abbreviated(text)} {reason}", param, ctx)
        return text


class ShellCommand(click.ParamType[str]):
    """A shell command: 1 to `MAX_COMMAND` characters with balanced quotes. Newlines and tabs
    are allowed (a script pasted over several lines is what a shell runs too); any other
    control character (a NUL, an escape) is refused."""

    name = "command"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text.strip():
            self.fail("an empty command", param, ctx)
        if len(text) > MAX_COMMAND:
            self.fail(f"{abbreviated(text)} is longer than {MAX_COMMAND} characters", param, ctx)
        if not all(c.isprintable() or c in _SCRIPT_WHITESPACE for c in text):
            reason = "has control characters (newlines and tabs are fine; a NUL or escape is not)"
            self.fail(f"{abbreviated(text)} {reason}", param, ctx)
        try:
            shlex.split(text)
        except ValueError as error:
            self.fail(f"{abbreviated(text)} is not a shell command line: {error}", param, ctx)
        return text


class Setting(click.ParamType[tuple[str, str]]):
    """A `KEY=VALUE` model parameter: KEY a name, VALUE visible text (checked by the model)."""

    name = "key=value"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        text = str(value)
        key, sep, setting = (part.strip() for part in text.partition("="))
        if not sep or not key:
            self.fail(f"{abbreviated(text)} is not KEY=VALUE (e.g. rms=3)", param, ctx)
        if len(text) > MAX_NAME or not text.isprintable() or not visible(key):
            self.fail(f"{abbreviated(text)} is not a short KEY=VALUE (e.g. rms=3)", param, ctx)
        return key, setting


class FiniteFloatRange(click.FloatRange):
    """`click.FloatRange` that also refuses `nan` and `inf` (which slip past its bounds)."""

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number", param, ctx)
        return number


def unknown_name(what: str, value: str, known: Iterable[str], listing: str) -> str:
    """One line for a name that is not in `known`: the close matches, and the command
    (`listing`) that lists them all -- never the whole list when it is long."""
    names = list(known)
    close = difflib.get_close_matches(value, names, n=3, cutoff=0.6)
    if len(names) <= 5:
        hint = f"known: {', '.join(names) or '(none)'}"
    elif close:
        hint = f"did you mean {' or '.join(close)}? `{listing}` lists all {len(names)}"
    else:
        hint = f"`{listing}` lists all {len(names)}"
    return f"no {what} named {abbreviated(value)}; {hint}"
