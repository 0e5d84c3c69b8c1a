"""A model's trace seen by one protocol table: the projection every model's traces share
(the design's and the implementation's), for `quiesce diagram TABLE --trace FILE`.
"""

from __future__ import annotations

from quiesce.models.projection._projection import (
    SPEC_TABLES,
    execution_key,
    instance_names,
    project_table,
    split_instance,
)

__all__ = ["SPEC_TABLES", "execution_key", "instance_names", "project_table", "split_instance"]
