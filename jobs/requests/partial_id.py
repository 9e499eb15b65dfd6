"""The request of the two-flank partial-identity density (``rosette density --flanks``) on text files or on the
catalogue's study."""

from __future__ import annotations

from dataclasses import dataclass

from core.field.partial_id import MIN_ESS
from jobs.requests._values import settle
from jobs.requests.density import optional_metres, optional_path
from jobs.requests.identities import whole_number
from jobs.requests.population import PopulationRequest

#: Limits of a fit's size: enough chains for R-hat, and iterations a person can wait for.
MAX_CHAINS = 8
MIN_ITERATIONS = 200
MAX_ITERATIONS = 1_000_000
DEFAULT_CHAINS = 3
DEFAULT_ITERATIONS = 20_000


@dataclass(frozen=True)
class PartialIdRequest(PopulationRequest):
    """Fit the partial-identity model (Augustine et al. 2018) to ``captures`` (``Session ID Occasion Detector
    Flank``, flank L, R or B) and ``traps`` (``Detector X Y cameras``, cameras 1 or 2 or one digit per occasion),
    with ``links`` (``left_id right_id`` per line) known otherwise. The activity centres lie in ``mask`` (a CSV of
    x,y points or a GeoJSON polygon, in the stations' metres; a polygon is cut to ``buffer_m`` round the stations)
    or, without one, in the stations' extent widened by ``buffer_m``. ``chains`` chains of ``iterations`` each (a
    quarter warm-up), from ``seed``; ``augmented`` is M (None: chosen from the data).

    Without ``captures`` and ``traps`` the catalogue's study is fitted: the species, window and occasions of
    :class:`PopulationRequest`, the stations in UTM metres, each detection's flank its annotation's label, the
    cameras of a station on an occasion its deployments active then; ``buffer_m`` None there is 4 x the spread of
    the animals' detections, as the ordinary density's default."""

    captures: str = ""
    traps: str = ""
    links: str | None = None
    buffer_m: float | None = None
    mask: str | None = None
    spacing_m: float | None = None
    chains: int = DEFAULT_CHAINS
    iterations: int = DEFAULT_ITERATIONS
    augmented: int | None = None
    seed: int = 0
    min_ess: float = float(MIN_ESS)

    def __post_init__(self) -> None:
        super().__post_init__()
        captures, traps = optional_path(self.captures), optional_path(self.traps)
        if (captures is None) != (traps is None):
            raise ValueError("--flanks fits text files or the catalogue: give both --captures FILE (with a Flank "
                             "column) and --traps FILE (with a cameras column), or neither to fit the catalogue")
        buffer_m = optional_metres(self.buffer_m, "buffer")
        mask = optional_path(self.mask)
        mask_points = mask is not None and mask.lower().endswith((".csv", ".txt"))
        # the catalogue's individuals give the ordinary density's default buffer (their detections' spread); a
        # file's flank identities are partial animals, so on files the state space is the user's to give
        if captures is not None and buffer_m is None and not mask_points:
            raise ValueError("give the state space: a buffer round the stations (--buffer M, 3 sigma or more) or a "
                             "mask CSV of x,y points (--mask FILE); a GeoJSON habitat needs --buffer as well")
        chains = whole_number(self.chains, "number of chains")
        if not 1 <= chains <= MAX_CHAINS:
            raise ValueError(f"the chains must number 1 to {MAX_CHAINS} (3 or more for R-hat), got {chains}")
        iterations = whole_number(self.iterations, "number of iterations")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"the iterations must be {MIN_ITERATIONS:,} to {MAX_ITERATIONS:,} per chain, got "
                             f"{iterations:,}")
        augmented = None if self.augmented is None else whole_number(self.augmented, "augmentation M")
        if augmented is not None and augmented < 2:
            raise ValueError(f"the augmentation M must be 2 or more, got {augmented}")
        seed = whole_number(self.seed, "seed")
        if seed < 0:
            raise ValueError(f"the seed must be 0 or more, got {seed}")
        if isinstance(self.min_ess, bool) or not isinstance(self.min_ess, (int, float)) or self.min_ess < 0:
            raise ValueError(f"the least effective sample size must be 0 or more, got {self.min_ess!r}")
        settle(self, captures=captures or "", traps=traps or "", links=optional_path(self.links), buffer_m=buffer_m,
               mask=mask,
               spacing_m=optional_metres(self.spacing_m, "mask spacing"), chains=chains, iterations=iterations,
               augmented=augmented, seed=seed, min_ess=float(self.min_ess))

    @property
    def from_files(self) -> bool:
        """True for the text files, False for the catalogue's study."""
        return bool(self.captures)
