"""Examples of adopting quiesce in services that already exist (docs/adopting.md); each one
is started and checked by tests/examples/."""
