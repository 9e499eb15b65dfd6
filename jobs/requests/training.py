"""The request of a training run (``rosette train``, the Jobs tab's form, ``rosette retrain`` / the Models tab's
Retrain): what to train on, with which backbone and head, and the training settings.

The settings are :class:`core.identify.training.TrainConfig`'s fields; a request holds the ones that were given
(``config``) and the run's defaults fill in the rest. A job stores the request flat, the settings next to the run's
own fields (``{"backbone": ..., "benchmark": ..., "head": "supcon", "epochs": 30, ...}``), as training jobs always
have, so the Jobs tab shows them and a job queued before this request existed is rebuilt the same way.

core.identify.training imports torch, so it is imported only when a request is checked (``rosette train`` and the worker
load torch anyway; the other commands start without it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from typing import TYPE_CHECKING, Any, Self

from core.identify.backbones import DEFAULT_BACKBONE
from core.requests import Request, RequestError, rebuild

if TYPE_CHECKING:
    from core.identify.training import TrainConfig

SOURCES = ("benchmark", "catalogue")
"""Where the training photos come from: a benchmark's train split, or every confirmed individual of the catalogue
(a benchmark's test photos are always left out)."""


def benchmark_names(text: str) -> tuple[str, ...]:
    """The benchmarks of ``--benchmark`` (one name, or several comma-separated: ``nyala,lions``), spaces around
    the names dropped; an empty name or a name given twice is refused."""
    names = tuple(part.strip() for part in str(text).split(","))
    if any(not n for n in names):
        raise ValueError(f"--benchmark {text!r}: an empty benchmark name; give names separated by commas "
                         "(nyala,lions)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"--benchmark {text!r}: {', '.join(twice)} given more than once")
    return names


@cache
def setting_names() -> frozenset[str]:
    """The training settings a request may give: :class:`core.identify.training.TrainConfig`'s fields."""
    from core.identify.training import TrainConfig  # lazy: core.identify.training imports torch

    return frozenset(f.name for f in fields(TrainConfig))


def train_config(settings: Mapping[str, Any]) -> TrainConfig:
    """The training config of the given settings (None: the default), checked as a stored request is: an unknown
    setting or a value of the wrong type raises :class:`RequestError` naming it, a bad value ``ValueError`` in
    TrainConfig's own words ("epochs must be at least 1"), an unknown head the head registry's error."""
    from core.identify.heads import head_spec  # lazy, as core.identify.training: imports torch
    from core.identify.training import TrainConfig  # lazy: imports torch

    given = {k: v for k, v in settings.items() if v is not None}
    unknown = sorted(set(given) - setting_names())
    if unknown:
        raise RequestError(f"TrainRequest: unknown training setting(s) {', '.join(map(repr, unknown))}; known: "
                           f"{', '.join(sorted(setting_names()))}")
    config = rebuild(TrainConfig, given, label="TrainRequest")
    head_spec(config.head)  # an unknown head is refused before anything is queued
    return config


@dataclass(frozen=True)
class TrainRequest(Request):
    """Train a model on ``source`` (``benchmark``'s train split, or the catalogue's confirmed individuals of
    ``species``), then evaluate it on ``benchmark``'s test split, diagnose it (unless ``diagnose`` is false; with
    ``masker`` / ``inpainter``) and compare it with ``compare_with``. ``name`` None: made from the settings.
    ``reason`` says why the run was queued (a retraining). ``benchmark`` may name several benchmarks separated
    by commas (``nyala,lions``): one model trains on all their train splits and is evaluated on each test split;
    the first is the main one (diagnosed and compared on)."""

    backbone: str = DEFAULT_BACKBONE
    source: str = "benchmark"
    benchmark: str | None = None
    species: int | None = None
    name: str | None = None
    device: str = "auto"
    diagnose: bool = True
    masker: str | None = None
    inpainter: str | None = None
    compare_with: str | None = None
    reason: str | None = None
    user: str = "curator"
    config: dict[str, Any] = field(default_factory=dict)
    """The training settings given (TrainConfig's fields); the others take TrainConfig's defaults."""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown training source {self.source!r}; expected benchmark or catalogue")
        if not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise ValueError(f"unknown device {self.device!r}; expected auto, cpu or cuda")
        if self.source == "benchmark" and not self.benchmark:
            raise ValueError("training from a benchmark needs its name (--benchmark NAME)")
        if self.benchmark:  # several comma-separated benchmarks: one model trained on all of them
            object.__setattr__(self, "benchmark", ",".join(benchmark_names(self.benchmark)))
        object.__setattr__(self, "config", {k: v for k, v in dict(self.config).items() if v is not None})
        train_config(self.config)

    def train_config(self) -> TrainConfig:
        """The run's :class:`core.identify.training.TrainConfig`."""
        return train_config(self.config)

    @property
    def benchmarks(self) -> tuple[str, ...]:
        """The benchmarks trained on (each a source of the identity-aware sampler) and evaluated on, in the order
        given; the first is the run's main one (its evaluation is the result's ``evaluation``)."""
        return benchmark_names(self.benchmark) if self.benchmark else ()

    def to_dict(self) -> dict[str, Any]:
        """Flat: the given settings and the run's fields side by side, as a job stores them; fields left at None
        are left out (they come back as None)."""
        stored = super().to_dict()
        return {**stored.pop("config"), **{k: v for k, v in stored.items() if v is not None}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The request a job stored flat (:meth:`to_dict`): TrainConfig's fields are the settings, refused with
        the field named when unknown or wrongly typed."""
        settings = setting_names()
        run = {f.name for f in fields(cls)} - {"config"}
        unknown = sorted(set(data) - settings - run)
        if unknown:
            raise RequestError(f"TrainRequest: unknown field(s) {', '.join(map(repr, unknown))}; known: "
                               f"{', '.join(sorted(run | settings))}")
        config = {k: v for k, v in data.items() if k in settings}
        train_config(config)
        return super().from_dict({**{k: v for k, v in data.items() if k in run}, "config": config})
