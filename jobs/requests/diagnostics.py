"""Request of the model diagnostics on a benchmark (``rosette diagnose``, the Diagnostics tab's "Run diagnostics in
the background", the ``diagnose`` job and the diagnostics after a training run): how much the model leans on the
background, whether it tells an animal from its mirror image, how well it recognises the other flank."""

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
