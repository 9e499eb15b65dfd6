"""Requests of the model diagnostics on a benchmark.

- :class:`DiagnoseRequest` (``rosette diagnose``, the Diagnostics tab's "Run diagnostics in the background", the
  ``diagnose`` job and the diagnostics after a training run): how much the model leans on the background, whether
  it tells an animal from its mirror image, how well it recognises the other flank.
- :class:`SensitivityRequest` (``rosette diagnose --sensitivity``, the tab's "Selective sensitivity" panel, the
  ``sensitivity`` job): does the model move more for another animal's coat than for a change of background,
  lighting or viewpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.requests import Request
from jobs.requests._values import settle


@dataclass(frozen=True)
class DiagnoseRequest(Request):
    """Diagnose ``backbone`` (a registry name or a trained model; None: the active model) on ``benchmark``'s test
    photos. Photos without a mask are masked by ``masker`` (None: SAM 2 if configured, else GrabCut), kept in the
    catalogue only with ``keep_masks``; backgrounds are painted out by ``inpainter`` (None: the default) once per
    seed."""

    benchmark: str
    backbone: str | None = None
    masker: str | None = None
    inpainter: str | None = None
    seeds: tuple[int, ...] = (0,)
    keep_masks: bool = False
    user: str = "curator"

    def __post_init__(self) -> None:
        if not self.benchmark:
            raise ValueError("Choose a benchmark first (or freeze one from the catalogue below).")
        seeds = tuple(self.seeds)
        if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
            raise ValueError("Give at least one seed, each 0 or more.")
        settle(self, backbone=self.backbone or None, masker=self.masker or None,
               inpainter=self.inpainter or None, seeds=seeds)


@dataclass(frozen=True)
class SensitivityRequest(Request):
    """Measure the selective sensitivity of ``backbone`` (None: the active model) on ``benchmark``'s test photos
    (``rosette diagnose --sensitivity``, the Diagnostics tab's "Selective sensitivity" panel and the ``sensitivity``
    job): edits of background, lighting, viewpoint and identity at five strengths, ``seed`` drawing each photo's
    edit directions and the bootstrap. Every test photo needs a mask; with ``mask_missing`` the photos without one
    are masked into the catalogue first by ``masker`` (None: SAM 2 if configured, else GrabCut). ``inpainter``
    paints out the borrowed backgrounds (None: the default); ``identity_edit`` is ``coat`` (another animal's coat
    blended in) or ``diffusion`` (the animal repainted; needs a diffusers model), None choosing by what is
    configured."""

    benchmark: str
    backbone: str | None = None
    seed: int = 0
    mask_missing: bool = False
    masker: str | None = None
    inpainter: str | None = None
    identity_edit: str | None = None
    user: str = "curator"

    def __post_init__(self) -> None:
        if not self.benchmark:
            raise ValueError("Choose a benchmark first (or freeze one from the catalogue).")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"The seed must be a whole number, 0 or more (got {self.seed!r}).")
        if self.identity_edit not in (None, "", "coat", "diffusion"):
            raise ValueError(f"The identity edit is 'coat' or 'diffusion' (got {self.identity_edit!r}).")
        settle(self, backbone=self.backbone or None, masker=self.masker or None, inpainter=self.inpainter or None,
               identity_edit=self.identity_edit or None)
