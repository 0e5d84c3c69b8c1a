"""Every count a rule change moves, pinned once: the tests assert these, and the pages that
quote one are checked against it (`tests/docs/test_readme_figures.py`).

A rule change that moves a count fails the test that exhausts it, which prints the new
value: paste it here (and in the page that quotes it, which then fails until it agrees),
with a line on why it moved. Each pin's history is the record that a move was understood.
"""

from __future__ import annotations

DESIGN_REFERENCE_STATES = 215_432
"""The design model at §8's reference size with fault budget 1 (siblings identified), as
`quiesce check` exhausts it by default. 216,092 until a participant restarted while
preparing was prepared again instead of failing the attempt (M1 `restarted`, issue 23): the
aborts those restarts began are gone."""

DESIGN_SMALL_STATES = {
    "reference_fault_free": 13_005,
    "one_rollout_every_fault": 1_212,
    "two_siblings_every_fault": 4_381,
}
"""Small design configurations exhausted on every run. The last two were 1,225 and 4,399
while a restart seen while preparing failed the attempt."""

DESIGN_STAGE_STATES = 3405
"""The mutant catalog's design stage, unmutated. 3,421 until a participant restarted while
its role was prepared was prepared again instead of failing the attempt (issue 23)."""

TWO_FAULT_DESIGN_STAGE_STATES = 9911
"""The mutant catalog's two-fault design stage, unmutated."""

PROTOCOL_STATES = {
    "one_rollout": 1655,
    "two_siblings": 26,
    "every_fault": 51_687,
    "two_siblings_one_checkpoint": 7252,
}
"""The protocol model's smallest exhaustive configurations
(`tests/models/implementation/test_protocol_model.py`). The two-sibling counts fell (54 ->
26, 21,685 -> 7,252) when the coordinator began to keep at most one background ACK batch
per agent in flight. Every fault's rose (47,381 -> 49,118 -> 51,687) when ACK batches and
retires became calls retried on their backoff, and again when a participant restarted
while its role was prepared was prepared again instead of failing the attempt (issue 23):
more interleavings, no violation."""

PROTOCOL_RETRIES_ON_STATES = 66_960
"""The protocol model with every fault on one rollout and one retry per call
(`tests/protocol/test_coordinator_retries.py`). 55,829 while release and abort went straight
to their pending state and one try of a prepare could wait out the whole prepare deadline;
52,199 while a background ACK batch, a retire and the strict flush were sent once (calls
since §4's amendment: 62,357), and while a participant restarted while prepared failed the
attempt."""

PORTFOLIO_STATES = (1655, 4965, 18063, 12402, 10210, 7194, 7012, 38527, 2158, 122, 46)
"""The portfolio's configurations, in order of first use (S1, S2, S3, S4, S5, S9, S11,
S12/S18, S16, S17, S19; `quiesce check --portfolio`). The fault configurations moved (12,086
-> 11,672, 10,568 -> 10,210, 37,138 -> 35,474) when a failed attempt began to count once
however often its abort fails (§4). S17's moved (428 -> 122) and S11's became exhaustible
(7,012; past 300,000 before) when the coordinator began to keep at most one background ACK
batch per agent in flight. Three moved when ACK batches and retires became calls retried on
their backoff and a participant restarted while preparing was prepared again (issue 23):
16,386 -> 18,063, 11,672 -> 12,402, 35,474 -> 38,527 (more interleavings; none violates).
S16's (2,158) joined when the model got its own budget of wrong digests (`digest_faults`:
a crash and a wrong digest at its restore, with no rollout, issue 28)."""

COVER_REPLAYS = (343, 71)
"""The transition cover without crashes: design states, and step labels replayed on the
system (354 states before the design's M1 kept the attempt's noted cause)."""

COVER_REPLAYS_WITH_CRASHES = (643, 82)
"""The same with crashes (a slow test): 654 states before M1 kept the noted cause."""

TWO_FAULT_COVER_STATES = 4305
"""The design cover at fault budget 2. 4,294 while a restart seen while preparing failed
the attempt (issue 23)."""

GENERATED_MUTANTS = 932
"""Mutants generated from the tables' rows (one fewer per row removed)."""

MUTANTS = 953
"""Every mutant of the catalog: the generated ones and 21 scenario mutants (`--sample`
takes 0..953)."""
