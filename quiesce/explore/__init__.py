"""A visual explorer, in the manner of Stateright's: step through a model in a web page.

The page shows the state diagram of every table the model composes with the current
control state highlighted, the actions enabled in the current state (to step by hand), the
path so far with a diff of each step, the properties with their status, and which rows of
each table the path fired. It opens on a counterexample (found by a check or random
walks, or read from a `quiesce check --json` file) or on the initial state.

A counterexample opens on its violating step, shown first: what the step moved (each
instance's states and rows), the property it broke and the fields it changed; the
diagrams of the tables it moved come next, open, and every other table folds to one line.
An agent execution has one name on the page, the one the model's actions use (`s1#0`).

`Session` computes everything the page shows; `render_page` makes it one self-contained
HTML file (`quiesce explore --html`); `explorer_app`/`serve` serve it on 127.0.0.1, where
the page can also take actions off the path.

>>> from quiesce.explore import Session, render_page
>>> from quiesce.check import build_model
>>> html = render_page(Session(build_model("two-phase")).document(served=False))
"""

from quiesce.explore._layout import table_svg
from quiesce.explore._page import render_page
from quiesce.explore._server import explorer_app, serve
from quiesce.explore._session import BadStep, Session
from quiesce.explore._traces import TraceFile, TraceFileError, TraceMismatch, read_trace, replay

__all__ = [
    "BadStep",
    "Session",
    "TraceFile",
    "TraceFileError",
    "TraceMismatch",
    "explorer_app",
    "read_trace",
    "render_page",
    "replay",
    "serve",
    "table_svg",
]
