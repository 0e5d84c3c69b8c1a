"""Models by name, with typed parameters, for `quiesce check`.

A model is registered as a factory plus the parameters it takes (`--set key=value`), so
the CLI can parse and validate every value before building anything. Packages that define
models register them at import; `known_models()` imports those packages first.

>>> model = build_model("two-phase", {"rms": "4"})  # doctest: +SKIP
>>> model.params  # doctest: +SKIP
{'rms': 4}
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any

from quiesce.check._explorer import Model
from quiesce.fsm import QuiesceError

__all__ = [
    "BadModelParam",
    "ModelSpec",
    "Param",
    "UnknownModel",
    "UnsupportedOption",
    "add_mutants",
    "build_model",
    "get_model_spec",
    "known_models",
    "params_of",
    "register_model",
    "with_faults",
]

# Packages whose import registers models (or attaches mutants to them), in the order
# `known_models()` lists them: the registry's plugins, named so that the checker imports
# none of them itself.
_PROVIDERS = (
    "quiesce.models.design",
    "quiesce.models.implementation",
    "quiesce.check._two_phase",
    "quiesce.mutants",
)
_MODELS: dict[str, ModelSpec] = {}


class UnknownModel(QuiesceError):
    """No model is registered under `name`; `known` lists those that are."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(
            f"no model named {name!r} is registered; known models: {', '.join(known) or '(none)'}"
        )


class BadModelParam(QuiesceError):
    """A `--set key=value` is wrong: unknown `key`, or a `value` it cannot take."""

    def __init__(self, model: str, key: str, value: str | None, reason: str, known: list[str]):
        self.model = model
        self.key = key
        self.value = value
        self.reason = reason
        self.known = known
        shown = key if value is None else f"{key}={value}"
        super().__init__(
            f"model {model!r}: bad parameter {shown!r}: {reason}; "
            f"known parameters: {', '.join(known) or '(none)'}"
        )


class UnsupportedOption(QuiesceError):
    """The model does not take `option` (`faults` or `mutant`), or not this value of it."""

    def __init__(self, model: str, option: str, detail: str) -> None:
        self.model = model
        self.option = option
        super().__init__(f"model {model!r} does not support --{option}: {detail}")


@dataclass(frozen=True)
class Param:
    """One model parameter: its type, default, allowed range and meaning."""

    name: str
    type: type[int] | type[bool] | type[str]
    default: Any
    doc: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] | None = None

    def parse(self, model: str, text: str, known: list[str]) -> Any:
        """The value of `text` for this parameter, or `BadModelParam` saying why not."""

        def refuse(reason: str) -> BadModelParam:
            return BadModelParam(model, self.name, text, reason, known)

        if self.type is bool:
            lowered = text.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise refuse("expected a boolean (true/false)")
        if self.type is int:
            try:
                number = int(text)
            except ValueError:
                raise refuse("expected an integer") from None
            if self.minimum is not None and number < self.minimum:
                raise refuse(f"must be >= {self.minimum}")
            if self.maximum is not None and number > self.maximum:
                raise refuse(f"must be <= {self.maximum}")
            return number
        if self.choices is not None and text not in self.choices:
            raise refuse(f"expected one of {', '.join(self.choices)}")
        return text


Factory = Callable[[Mapping[str, Any], int | None, str | None], Model[Any]]
"""`factory(params, faults, mutant) -> Model`; raise `UnsupportedOption` for what it lacks."""


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: its name, factory, parameters, and the mutants it accepts."""

    name: str
    factory: Factory
    doc: str
    params: tuple[Param, ...] = ()
    mutants: Mapping[str, str] = field(default_factory=dict)
    faults: bool = False

    def defaults(self) -> dict[str, Any]:
        """Every parameter at its default."""
        return {p.name: p.default for p in self.params}

    def parse(self, settings: Mapping[str, str]) -> dict[str, Any]:
        """Defaults overridden by `settings` (`key -> text`), each parsed and validated."""
        by_name = {p.name: p for p in self.params}
        known = list(by_name)
        values = self.defaults()
        for key, text in settings.items():
            param = by_name.get(key)
            if param is None:
                raise BadModelParam(self.name, key, text, "unknown parameter", known)
            values[key] = param.parse(self.name, text, known)
        return values


def params_of(
    defaults: Any, docs: Mapping[str, str], choices: Mapping[str, type[Enum]] | None = None
) -> tuple[Param, ...]:
    """The parameters of a model whose sizes are the dataclass `defaults`: booleans, counts
    from 0 to 16, and text fields whose values are those of the enum `choices[name]` (so a
    new member is a choice without a second list to update); each documented by
    `docs[name]`."""

    def param(name: str, default: Any) -> Param:
        if isinstance(default, bool):
            return Param(name, bool, default, docs[name])
        if isinstance(default, int):
            return Param(name, int, default, docs[name], minimum=0, maximum=16)
        values = tuple(member.value for member in (choices or {})[name])
        return Param(name, str, default, docs[name], choices=values)

    return tuple(param(f.name, getattr(defaults, f.name)) for f in fields(defaults))


def with_faults(params: Mapping[str, Any], faults: int | None) -> dict[str, Any]:
    """`params` with the fault budget `faults` (`--faults K`) when one is given."""
    values = dict(params)
    if faults is not None:
        values["faults"] = faults
    return values


def register_model(spec: ModelSpec) -> ModelSpec:
    """Register `spec` under its name (another spec with that name is an error)."""
    existing = _MODELS.get(spec.name)
    if existing is not None and existing is not spec:
        raise ValueError(f"a different model is already registered as {spec.name!r}")
    _MODELS[spec.name] = spec
    return spec


def add_mutants(name: str, docs: Mapping[str, str], factory: Factory) -> ModelSpec:
    """Attach mutants to the model registered as `name`: `docs` by mutant name, each built
    by `factory(params, faults, mutant)`. A catalog of known bugs (`quiesce.mutants`) calls
    it, so a model's own registration knows no mutant."""
    spec = _MODELS[name]
    own = spec.factory

    def build(params: Mapping[str, Any], faults: int | None, mutant: str | None) -> Model[Any]:
        if mutant is not None and mutant in docs:
            return factory(params, faults, mutant)
        return own(params, faults, mutant)

    attached = replace(spec, factory=build, mutants={**spec.mutants, **docs})
    _MODELS[name] = attached
    return attached


def known_models() -> dict[str, ModelSpec]:
    """Every registered model by name, in registration order."""
    for provider in _PROVIDERS:
        importlib.import_module(provider)
    return dict(_MODELS)


def get_model_spec(name: str) -> ModelSpec:
    """The model registered as `name`, or `UnknownModel` listing the known ones."""
    models = known_models()
    if name not in models:
        raise UnknownModel(name, list(models))
    return models[name]


def build_model(
    name: str,
    settings: Mapping[str, str] | None = None,
    *,
    faults: int | None = None,
    mutant: str | None = None,
) -> Model[Any]:
    """Build the model `name` with `--set` style `settings`, a fault budget and a mutant.

    Raises `UnknownModel`, `BadModelParam` or `UnsupportedOption` before building anything.
    """
    spec = get_model_spec(name)
    params = spec.parse(settings or {})
    if faults is not None and not spec.faults:
        raise UnsupportedOption(name, "faults", "it has no fault actions")
    if mutant is not None and mutant not in spec.mutants:
        known = ", ".join(spec.mutants) or "(none)"
        raise UnsupportedOption(name, "mutant", f"no mutant {mutant!r}; known mutants: {known}")
    return spec.factory(params, faults, mutant)
