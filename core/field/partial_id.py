"""Two-flank partial identity: density from one-flank camera photos (Augustine et al. 2018, Annals of Applied
Statistics 12(1), "Spatial capture-recapture with partial identity: an application to camera traps").

A left-flank photo can be matched only to left flanks, so a one-camera study holds left and right identities that
no pattern links; a both-side capture ("B") at a two-camera station links them. This module fits the paper's
Bayesian SCR with data augmentation (M individuals, centres uniform over the state space, half-normal detection
with ``p0S`` for one side and ``p0B`` for both at a two-camera station), the left-right linkage latent and updated
by the paper's ID sampler (a flank identity moves to an individual chosen by distance, swapping with the one there;
Metropolis-Hastings with the proposal's asymmetry). The model and the sampler's derivation: docs/density.md,
"One-flank photos". Capture histories are kept as counts per individual and station, split by the number of
cameras (a Bernoulli per occasion sums to a binomial). Pure numpy; the readers of the text files are here too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.field.scr_errors import DensityInputError, DetectorLayoutError, UnknownDetector
from core.field.scr_mask import Mask

FLANK_CODES = ("L", "R", "B")
#: Convergence limits a fit must meet to be shown: split R-hat at most this, and this many effective draws.
RHAT_LIMIT = 1.1
MIN_ESS = 100


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class FlankStation:
    """One station: its name, coordinates in metres, and cameras working on each occasion (0, 1 or 2)."""

    name: str
    x: float
    y: float
    cameras: tuple[int, ...]


@dataclass(frozen=True)
class FlankCapture:
    """One photograph event: ``identity`` is a left-flank identity (flank L), a right-flank identity (R) or an
    animal photographed on both sides at once (B); occasions count from 1."""

    identity: str
    occasion: int
    station: str
    flank: str


@dataclass(frozen=True, eq=False)
class FlankData:
    """Capture histories as the sampler uses them. Identities ``0 .. n_fixed-1`` on each side belong to the animals
    whose two sides are known (B captures, then known links), in the same order; the rest are free. Counts are
    occasions with a capture, per identity and station, at one-camera (``1``) and two-camera (``2``) occasions."""

    station_names: tuple[str, ...]
    xy: np.ndarray  # (J, 2)
    k1: np.ndarray  # (J,) occasions with one camera
    k2: np.ndarray  # (J,) occasions with two cameras
    n_fixed: int
    n_both: int  # fixed animals seen on both sides at once (the rest of the fixed ones are known links)
    left_names: tuple[str, ...]
    right_names: tuple[str, ...]
    y_left1: np.ndarray  # (nL, J)
    y_left2: np.ndarray
    y_right1: np.ndarray  # (nR, J)
    y_right2: np.ndarray
    y_both: np.ndarray  # (n_fixed, J) both-side captures (two-camera occasions only)
    sides: int = 2  # flanks observed: 1 for a left-only analysis (:func:`left_only`)
    #: (left, right) indices of free identities a curator said are not one animal: never put on one individual
    cannot_link: tuple[tuple[int, int], ...] = ()

    @property
    def n_left(self) -> int:
        return len(self.left_names)

    @property
    def n_right(self) -> int:
        return len(self.right_names)

    @property
    def has_two_cameras(self) -> bool:
        return bool(self.k2.sum() > 0)


def _fields(path: str | Path) -> list[tuple[int, list[str]]]:
    rows = []
    for number, raw in enumerate(Path(path).read_text(encoding="utf-8-sig").splitlines(), start=1):
        body = raw.split("#", 1)[0].replace(",", " ").strip()
        if body:
            rows.append((number, body.split()))
    return rows


def _camera_codes(text: str, where: str) -> tuple[int, ...]:
    if not text.isdigit() or any(c not in "012" for c in text):
        raise DensityInputError(f"{where}: cameras {text!r} must be 1 or 2, or one digit 0/1/2 per occasion")
    return tuple(int(c) for c in text)


def read_flank_traps(path: str | Path) -> list[FlankStation]:
    """Stations from ``Detector X Y cameras`` lines (a header line naming the columns may come first):
    ``cameras`` is 1 or 2 for every occasion, or a string of 0/1/2, one digit per occasion (0: not working). With
    one digit on every line the occasions are counted to the last capture's, as secr's ``read.capthist`` counts
    them; give one digit per occasion to count quiet occasions after it."""
    rows = _fields(path)
    if rows and rows[0][1] and rows[0][1][-1].lower() == "cameras":
        rows = rows[1:]
    if not rows:
        raise DetectorLayoutError(f"{path}: no station lines (expected 'Detector X Y cameras')")
    stations: list[FlankStation] = []
    seen: set[str] = set()
    for number, f in rows:
        where = f"{Path(path).name} line {number}"
        if len(f) < 4:
            raise DensityInputError(f"{where}: expected 'Detector X Y cameras', got {' '.join(f)!r}; every station "
                                    "needs its cameras (1 or 2)")
        try:
            x, y = float(f[1]), float(f[2])
        except ValueError:
            raise DetectorLayoutError(f"{where}: X and Y must be numbers (metres), got {f[1]!r} {f[2]!r}") from None
        if not (math.isfinite(x) and math.isfinite(y)):
            raise DetectorLayoutError(f"{where}: X and Y must be finite metres")
        if f[0] in seen:
            raise DetectorLayoutError(f"{where}: station {f[0]!r} is listed twice; give each station one line")
        seen.add(f[0])
        stations.append(FlankStation(f[0], x, y, _camera_codes(f[3], where)))
    lengths = {len(s.cameras) for s in stations if len(s.cameras) > 1}
    if len(lengths) > 1:
        raise DensityInputError(f"{path}: stations give cameras for different numbers of occasions "
                                f"({sorted(lengths)}); give one digit per occasion on every line, or one for all")
    return stations


def read_flank_captures(path: str | Path) -> list[FlankCapture]:
    """Captures from ``Session ID Occasion Detector Flank`` lines (secr's captures with a flank column; a header line
    naming the columns may come first and then sets their order). One session only."""
    rows = _fields(path)
    columns = {"session": 0, "id": 1, "occasion": 2, "detector": 3, "flank": 4}
    if rows and "flank" in [c.lower() for c in rows[0][1]]:
        header = [c.lower() for c in rows[0][1]]
        missing = [c for c in columns if c not in header]
        if missing:
            raise DensityInputError(f"{Path(path).name}: the header lacks {', '.join(missing)}; expected "
                                    "'Session ID Occasion Detector Flank'")
        columns = {c: header.index(c) for c in columns}
        rows = rows[1:]
    need = max(columns.values()) + 1
    out: list[FlankCapture] = []
    sessions: set[str] = set()
    for number, f in rows:
        where = f"{Path(path).name} line {number}"
        if len(f) < need:
            raise DensityInputError(f"{where}: expected 'Session ID Occasion Detector Flank', got {' '.join(f)!r}")
        flank = f[columns["flank"]].upper()
        if flank not in FLANK_CODES:
            raise DensityInputError(f"{where}: flank {f[columns['flank']]!r} unknown; use L (left), R (right) or B "
                                    "(both sides at once, two cameras)")
        try:
            occasion = float(f[columns["occasion"]])
        except ValueError:
            occasion = math.nan
        if not (math.isfinite(occasion) and occasion == int(occasion) and occasion >= 1):
            raise DensityInputError(f"{where}: occasion {f[columns['occasion']]!r} is not a whole number from 1")
        sessions.add(f[columns["session"]])
        out.append(FlankCapture(f[columns["id"]], int(occasion), f[columns["detector"]], flank))
    if not out:
        raise DensityInputError(f"{path}: no capture lines (expected 'Session ID Occasion Detector Flank')")
    if len(sessions) > 1:
        raise DensityInputError(f"{Path(path).name} holds {len(sessions)} sessions; the partial-identity model fits "
                                "one session: give one session's captures")
    return out


def read_flank_links(path: str | Path) -> list[tuple[str, str]]:
    """Known links, ``left_id right_id`` per line."""
    links = []
    for number, f in _fields(path):
        if len(f) != 2:
            raise DensityInputError(f"{Path(path).name} line {number}: expected 'left_id right_id', got "
                                    f"{' '.join(f)!r}")
        links.append((f[0], f[1]))
    return links


def flank_data(captures: Sequence[FlankCapture], stations: Sequence[FlankStation],
               links: Sequence[tuple[str, str]] = (), *,
               cannot_link: Sequence[tuple[str, str]] = ()) -> FlankData:
    """The sampler's capture histories, every input fault refused in one line. An ID on B rows names an animal whose
    left and right identities both carry that name (its L and R rows are its one-side captures); other left and
    right names are separate identities unless a link joins them. ``cannot_link`` pairs (left, right) are ones a
    curator rejected: the sampler never links them; a pair naming no free identity on a side is dropped (the
    sampler could not link it anyway), and one that is also a link is refused."""
    if not stations:
        raise DetectorLayoutError("no stations")
    if not captures:
        raise DensityInputError("no captures: a density needs photographed animals")
    index = {s.name: j for j, s in enumerate(stations)}
    unknown = sorted({c.station for c in captures if c.station not in index})
    if unknown:
        raise UnknownDetector(f"captures name station(s) the traps do not list: {', '.join(unknown[:5])}; add them "
                              "to the traps file or correct the captures")
    n_occ = max([len(s.cameras) for s in stations if len(s.cameras) > 1] + [max(c.occasion for c in captures)])
    cams = np.array([s.cameras * n_occ if len(s.cameras) == 1 else s.cameras for s in stations], dtype=int)
    if cams.shape[1] != n_occ:
        raise DensityInputError(f"captures fall on occasion {max(c.occasion for c in captures)} but the stations give "
                                f"cameras for {cams.shape[1]} occasions")
    xy = np.array([[s.x, s.y] for s in stations], dtype=float)
    for c in captures:
        working = cams[index[c.station], c.occasion - 1]
        if c.flank == "B" and working != 2:
            raise DensityInputError(f"{c.identity!r} is a both-side (B) capture at station {c.station!r} on occasion "
                                    f"{c.occasion}, which has {working} camera(s) then; one camera sees one flank at a "
                                    "time: give the station 2 cameras or the capture L or R")
        if working == 0:
            raise DensityInputError(f"{c.identity!r} is captured at station {c.station!r} on occasion {c.occasion}, "
                                    "when it has no working camera; correct the cameras or the capture")
    both = sorted({c.identity for c in captures if c.flank == "B"})
    lefts = sorted({c.identity for c in captures if c.flank == "L"} - set(both))
    rights = sorted({c.identity for c in captures if c.flank == "R"} - set(both))
    linked_left: dict[str, str] = {}
    linked_right: dict[str, str] = {}
    left_known, right_known = set(lefts) | set(both), set(rights) | set(both)
    for left, right in links:
        if left not in left_known:
            if left in right_known and right in right_known:
                raise DensityInputError(f"link {left} {right}: both are right-flank identities; a link joins a left "
                                        "identity (first) to a right identity (second)")
            raise DensityInputError(f"link {left} {right}: {left!r} is no left-flank identity of the captures (a "
                                    "link names the left identity first)")
        if right not in right_known:
            if right in left_known:
                raise DensityInputError(f"link {left} {right}: both are left-flank identities; a link joins a left "
                                        "identity (first) to a right identity (second)")
            raise DensityInputError(f"link {left} {right}: {right!r} is no right-flank identity of the captures")
        if left in both or right in both:
            if left != right:
                animal = left if left in both else right
                raise DensityInputError(f"link {left} {right}: {animal!r} was photographed on both sides at once, so "
                                        "its other flank is already known")
            continue
        if left in linked_left or right in linked_right:
            raise DensityInputError(f"link {left} {right}: {left if left in linked_left else right!r} is linked "
                                    "twice; an identity belongs to one animal")
        linked_left[left], linked_right[right] = right, left
    pairs = [(a, linked_left[a]) for a in lefts if a in linked_left]
    free_left = [a for a in lefts if a not in linked_left]
    free_right = [a for a in rights if a not in linked_right]
    left_names = tuple(both + [a for a, _ in pairs] + free_left)
    right_names = tuple(both + [b for _, b in pairs] + free_right)
    n_fixed = len(both) + len(pairs)
    banned = _cannot_link_indices(cannot_link, links, left_names, right_names, n_fixed)
    J = len(stations)
    y_l = np.zeros((len(left_names), J, n_occ), dtype=bool)
    y_r = np.zeros((len(right_names), J, n_occ), dtype=bool)
    y_b = np.zeros((n_fixed, J, n_occ), dtype=bool)
    li = {n: i for i, n in enumerate(left_names)}
    ri = {n: i for i, n in enumerate(right_names)}
    for c in captures:
        j, k = index[c.station], c.occasion - 1
        if c.flank == "B":
            y_b[li[c.identity], j, k] = True
        elif c.flank == "L":
            y_l[li[c.identity], j, k] = True
        else:
            y_r[ri[c.identity], j, k] = True
    one, two = cams == 1, cams == 2

    def split(y: np.ndarray, which: np.ndarray) -> np.ndarray:
        return (y & which[None]).sum(axis=2).astype(float)

    return FlankData(station_names=tuple(s.name for s in stations), xy=xy, k1=one.sum(axis=1).astype(float),
                     k2=two.sum(axis=1).astype(float), n_fixed=n_fixed, n_both=len(both), left_names=left_names,
                     right_names=right_names, y_left1=split(y_l, one), y_left2=split(y_l, two),
                     y_right1=split(y_r, one), y_right2=split(y_r, two), y_both=split(y_b, two),
                     cannot_link=banned)


def _cannot_link_indices(cannot_link: Sequence[tuple[str, str]], links: Sequence[tuple[str, str]],
                         left_names: Sequence[str], right_names: Sequence[str],
                         n_fixed: int) -> tuple[tuple[int, int], ...]:
    """The rejected pairs as (left, right) indices of free identities; a rejected pair that is also a link is a
    contradiction and refused."""
    known = set(links)
    li = {n: i for i, n in enumerate(left_names) if i >= n_fixed}
    ri = {n: i for i, n in enumerate(right_names) if i >= n_fixed}
    out = set()
    for left, right in cannot_link:
        if (left, right) in known:
            raise DensityInputError(f"link {left} {right}: that pair was also rejected as not one animal; keep one "
                                    "of the two")
        if left in li and right in ri:
            out.add((li[left], ri[right]))
    return tuple(sorted(out))


def left_only(data: FlankData) -> FlankData:
    """The study as a left-only SCR sees it (what a study does today without this model): every left identity an
    animal of its own, right flanks and both-side captures dropped, one side's misses in the likelihood."""
    n, J = data.n_left, data.xy.shape[0]
    zeros = np.zeros((n, J))
    return FlankData(station_names=data.station_names, xy=data.xy, k1=data.k1, k2=data.k2, n_fixed=n, n_both=0,
                     left_names=data.left_names, right_names=data.left_names, y_left1=data.y_left1,
                     y_left2=data.y_left2, y_right1=zeros, y_right2=zeros, y_both=zeros, sides=1)


# --------------------------------------------------------------------------- state space


@dataclass(frozen=True, eq=False)
class StateSpace:
    """Where activity centres may lie: the union of square cells of side ``spacing`` whose lower-left corners are
    ``origin + spacing * (col, row)`` for the True entries of ``cells`` (rows y, columns x), or one rectangle."""

    origin: np.ndarray  # (2,)
    spacing: np.ndarray  # (2,) cell width and height
    cells: np.ndarray  # (rows, cols) bool

    @classmethod
    def rectangle(cls, lo: Sequence[float], hi: Sequence[float]) -> StateSpace:
        lo_a, hi_a = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
        if np.any(hi_a <= lo_a):
            raise DensityInputError("the state space needs a positive width and height")
        return cls(origin=lo_a, spacing=hi_a - lo_a, cells=np.ones((1, 1), dtype=bool))

    @classmethod
    def around(cls, xy: np.ndarray, *, buffer_m: float) -> StateSpace:
        """The paper's state space: the stations' extent widened by ``buffer_m`` on every side."""
        if not (math.isfinite(buffer_m) and buffer_m > 0):
            raise DensityInputError(f"the buffer must be more than 0 m, got {buffer_m}; give about 3 sigma or more")
        return cls.rectangle(xy.min(axis=0) - buffer_m, xy.max(axis=0) + buffer_m)

    @classmethod
    def from_mask(cls, mask: Mask) -> StateSpace:
        """A habitat mask's points as the centres of square cells of its spacing."""
        h = float(mask.spacing_m)
        lo = mask.xy.min(axis=0) - h / 2
        idx = np.rint((mask.xy - lo - h / 2) / h).astype(int)
        cells = np.zeros((idx[:, 1].max() + 1, idx[:, 0].max() + 1), dtype=bool)
        cells[idx[:, 1], idx[:, 0]] = True
        return cls(origin=lo, spacing=np.array([h, h]), cells=cells)

    @property
    def area_km2(self) -> float:
        return float(self.cells.sum() * self.spacing.prod()) / 1e6

    @property
    def extent(self) -> float:
        """The diagonal of the bounding box (m)."""
        return float(np.hypot(*(self.spacing * self.cells.shape[::-1])))

    def contains(self, xy: np.ndarray) -> np.ndarray:
        rel = (xy - self.origin) / self.spacing
        col, row = np.floor(rel[..., 0]).astype(int), np.floor(rel[..., 1]).astype(int)
        rows, cols = self.cells.shape
        inside = (col >= 0) & (col < cols) & (row >= 0) & (row < rows)
        out = np.zeros(inside.shape, dtype=bool)
        out[inside] = self.cells[row[inside], col[inside]]
        return out

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        rows, cols = np.nonzero(self.cells)
        pick = rng.integers(0, rows.size, n)
        corner = self.origin + self.spacing * np.column_stack([cols[pick], rows[pick]])
        return corner + rng.random((n, 2)) * self.spacing

    def nearest_inside(self, xy: np.ndarray) -> np.ndarray:
        """Each point, or where it is outside, the centre of the nearest cell."""
        rows, cols = np.nonzero(self.cells)
        centres = self.origin + self.spacing * (np.column_stack([cols, rows]) + 0.5)
        out = xy.copy()
        outside = ~self.contains(xy)
        if outside.any():
            d2 = ((xy[outside, None, :] - centres[None]) ** 2).sum(axis=2)
            out[outside] = centres[d2.argmin(axis=1)]
        return out


# --------------------------------------------------------------------------- diagnostics


def _autocovariance(x: np.ndarray) -> np.ndarray:
    """Autocovariance of each row at every lag (FFT), biased as Stan's."""
    n = x.shape[-1]
    centred = x - x.mean(axis=-1, keepdims=True)
    size = 1 << (2 * n - 1).bit_length()
    spectrum = np.fft.rfft(centred, n=size, axis=-1)
    return np.fft.irfft(spectrum * np.conj(spectrum), n=size, axis=-1)[..., :n] / n


def _split(draws: np.ndarray) -> np.ndarray:
    half = draws.shape[1] // 2
    return np.concatenate([draws[:, :half], draws[:, draws.shape[1] - half:]], axis=0)


def split_rhat(draws: np.ndarray) -> float:
    """Split R-hat (Gelman et al., BDA3) of draws (chains, iterations): NaN when the draws do not vary."""
    x = _split(np.asarray(draws, dtype=float))
    n = x.shape[1]
    within = x.var(axis=1, ddof=1).mean()
    between = n * x.mean(axis=1).var(ddof=1)
    if within <= 0:
        return math.nan
    var_plus = (n - 1) / n * within + between / n
    return float(math.sqrt(var_plus / within))


def effective_sample_size(draws: np.ndarray) -> float:
    """Effective sample size of draws (chains, iterations) over split chains, with Geyer's initial monotone
    sequence (as Stan computes it): NaN when the draws do not vary."""
    x = _split(np.asarray(draws, dtype=float))
    m, n = x.shape
    acov = _autocovariance(x)
    within = acov[:, 0].mean() * n / (n - 1)
    if within <= 0:
        return math.nan
    var_plus = within * (n - 1) / n + (x.mean(axis=1).var(ddof=1) if m > 1 else 0.0)
    rho = 1.0 - (within - acov.mean(axis=0)) / var_plus
    rho[0] = 1.0
    pairs = rho[:-1:2] + rho[1::2]  # Geyer: sums of adjacent pairs, kept while positive and made monotone
    positive = np.flatnonzero(pairs <= 0)
    pairs = pairs[: positive[0]] if positive.size else pairs
    pairs = np.minimum.accumulate(pairs)
    tau = max(-1.0 + 2.0 * pairs.sum(), 1.0 / math.log10(max(m * n, 10)))
    return float(m * n / tau)


# --------------------------------------------------------------------------- the sampler


@dataclass(frozen=True)
class Posterior:
    mean: float
    median: float
    lcl: float
    ucl: float

    @classmethod
    def of(cls, draws: np.ndarray) -> Posterior:
        flat = np.asarray(draws, dtype=float).ravel()
        lo, med, hi = np.quantile(flat, [0.025, 0.5, 0.975])
        return cls(float(flat.mean()), float(med), float(lo), float(hi))

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "median": self.median, "lcl": self.lcl, "ucl": self.ucl}


@dataclass(frozen=True, eq=False)
class PartialIdFit:
    """A fit's posterior: N in the state space, D per 100 km², p0 of one side (and of both sides at two-camera
    stations), sigma (m), the number of linked left-right pairs (known ones included), the probability that each
    left and right identity are one animal, and the diagnostics. ``refused`` is one sentence when the chains did
    not converge or mix enough to show a figure (the figures are kept for inspection)."""

    n: Posterior
    d_per_100km2: Posterior
    p0_single: Posterior
    p0_both: Posterior | None
    sigma_m: Posterior
    linked_pairs: float
    known_pairs: int
    left_names: tuple[str, ...]
    right_names: tuple[str, ...]
    n_fixed: int
    link_probabilities: np.ndarray  # (nL, nR)
    rhat: dict[str, float]
    ess: dict[str, float]
    chains: int
    iterations: int
    warmup: int
    augmented: int
    area_km2: float
    seconds: float
    acceptance: dict[str, float]
    draws: dict[str, np.ndarray] = field(repr=False)  # (chains, kept iterations) of N, sigma, p0S, p0B, psi, pairs
    refused: str | None = None

    @property
    def rhat_max(self) -> float:
        values = [v for v in self.rhat.values() if math.isfinite(v)]
        return max(values) if values else math.nan

    @property
    def ess_min(self) -> float:
        values = [v for v in self.ess.values() if math.isfinite(v)]
        return min(values) if values else math.nan

    def link_list(self, *, at_least: float = 0.0) -> list[dict[str, Any]]:
        """Every left-right pair with a posterior probability above ``at_least``, most probable first; known pairs
        (both-side captures, confirmed links) say so."""
        rows = []
        for a, b in zip(*np.nonzero(self.link_probabilities > at_least)):
            rows.append({"left": self.left_names[a], "right": self.right_names[b],
                         "probability": float(self.link_probabilities[a, b]),
                         "known": bool(a < self.n_fixed and a == b)})
        return sorted(rows, key=lambda r: (-r["probability"], r["left"], r["right"]))


class _Chain:
    """One chain's state and its Metropolis-within-Gibbs updates (see the module's docstring)."""

    def __init__(self, data: FlankData, space: StateSpace, *, augmented: int, rng: np.random.Generator,
                 prop_scale: float) -> None:
        self.d, self.space, self.M, self.rng, self.prop_scale = data, space, augmented, rng, prop_scale
        M, J = augmented, data.xy.shape[0]
        nf, nl, nr = data.n_fixed, data.n_left, data.n_right
        self.free_l = np.arange(nf, nl)
        self.free_r = np.arange(nf, nr)
        # each free identity starts on its own individual: no link is assumed at the start
        self.at_l = np.concatenate([np.arange(nf), nf + np.arange(nl - nf)])
        self.at_r = np.concatenate([np.arange(nf), nf + (nl - nf) + np.arange(nr - nf)])
        self.owner_l = np.full(M, -1)
        self.owner_l[self.at_l] = np.arange(nl)
        self.owner_r = np.full(M, -1)
        self.owner_r[self.at_r] = np.arange(nr)
        self.yb = np.zeros((M, J))
        self.yb[:nf] = data.y_both
        # rejected pairs, per side: an identity -> the other side's identities it must never share an individual with
        self.banned_l: dict[int, set[int]] = {}
        self.banned_r: dict[int, set[int]] = {}
        for left, right in data.cannot_link:
            self.banned_l.setdefault(left, set()).add(right)
            self.banned_r.setdefault(right, set()).add(left)
        self._gather()
        has = self.has_data()
        self.z = has | (rng.random(M) < 0.3)
        # centres: the mean of each individual's stations, else anywhere
        seen = self.ys1 + self.ys2 + self.yb
        self.s = space.sample(rng, M)
        for i in np.flatnonzero(has):
            w = seen[i]
            self.s[i] = (w[:, None] * data.xy).sum(axis=0) / w.sum() + rng.normal(0, 1e-3 * space.extent, 2)
        self.s = space.nearest_inside(self.s)
        spacing = _station_spacing(data.xy)
        self.sigma = float(spacing * rng.uniform(0.4, 0.9))
        self.p0s = float(rng.uniform(0.05, 0.25))
        self.p0b = float(rng.uniform(0.05, 0.25))
        self.psi = float(self.z.mean())
        self.sigma_max = space.extent
        self.step = {"sigma": 0.1 * self.sigma, "p0s": 0.03, "p0b": 0.03, "s": 0.5 * self.sigma, "block": 1.0}
        self.block: np.ndarray | None = None
        self.history: list[tuple[float, float, float]] = []
        self.recording = False
        self.tries = {k: 0 for k in self.step}
        self.accepts = {k: 0 for k in self.step}
        self.two = data.has_two_cameras
        self.d2 = self._d2(self.s)
        self.terms: tuple[np.ndarray, ...] | None = None

    # -- bookkeeping

    def has_data(self) -> np.ndarray:
        """Individuals holding a capture (every identity has one; the fixed animals always do)."""
        out = (self.owner_l >= 0) | (self.owner_r >= 0)
        out[: self.d.n_fixed] = True
        return out

    def _gather(self) -> None:
        """Per-individual one-side counts from where each identity sits."""
        M, J = self.M, self.d.xy.shape[0]
        self.ys1 = np.zeros((M, J))
        self.ys2 = np.zeros((M, J))
        self.ys1[self.at_l] += self.d.y_left1
        self.ys2[self.at_l] += self.d.y_left2
        self.ys1[self.at_r] += self.d.y_right1
        self.ys2[self.at_r] += self.d.y_right2

    def _d2(self, s: np.ndarray) -> np.ndarray:
        x, y = self.d.xy[:, 0], self.d.xy[:, 1]
        return (s[:, 0:1] - x[None]) ** 2 + (s[:, 1:2] - y[None]) ** 2

    # -- likelihood

    def _terms(self, d2: np.ndarray, sigma: float, p0s: float, p0b: float) -> tuple[np.ndarray, ...]:
        """The log-likelihood's pieces at every individual and station: what one occasion with a one-side capture
        adds over none at a one-camera (``w1``) and a two-camera station (``w2``), what a both-side capture adds
        (``wb``), and each individual's log-probability of no capture at all (``base``, (M,))."""
        d = self.d
        h = d2 / (2.0 * sigma * sigma)
        k = np.exp(-h)
        ps = p0s * k
        miss = np.log1p(-ps)  # one side, one camera, one occasion: not photographed
        w1 = (math.log(p0s) - h) - miss
        w2 = w1 + np.log(2.0 - ps) - miss  # 1 - (1 - ps)^2 = ps (2 - ps), over (1 - ps)^2
        base = miss @ (d.sides * (d.k1 + 2.0 * d.k2))
        if not self.two:
            return w1, w2, None, base
        pb = p0b * k
        miss_b = np.log1p(-pb)
        return w1, w2, (math.log(p0b) - h) - miss_b, base + miss_b @ d.k2

    def _loglik(self, terms: tuple[np.ndarray, ...]) -> np.ndarray:
        """Each individual's log-likelihood of its current captures, as if it were in the population (M,)."""
        w1, w2, wb, base = terms
        ll = (self.ys1 * w1 + self.ys2 * w2).sum(axis=1) + base
        if wb is not None and self.d.n_fixed:
            ll[: self.d.n_fixed] += (self.yb[: self.d.n_fixed] * wb[: self.d.n_fixed]).sum(axis=1)
        return ll

    def loglik(self, d2: np.ndarray, sigma: float, p0s: float, p0b: float) -> np.ndarray:
        return self._loglik(self._terms(d2, sigma, p0s, p0b))

    def _metropolis(self, name: str, proposal: float, low: float, high: float) -> None:
        self.tries[name] += 1
        if not (low < proposal < high):
            return
        params = {"sigma": self.sigma, "p0s": self.p0s, "p0b": self.p0b}
        params[name] = proposal
        terms = self._terms(self.d2, params["sigma"], params["p0s"], params["p0b"])
        new_ll = self._loglik(terms)
        new = float(new_ll[self.z].sum())
        if math.log(self.rng.random()) < new - self.ll_total:
            setattr(self, name, proposal)
            self.terms, self.ll, self.ll_total = terms, new_ll, new
            self.accepts[name] += 1

    # -- one sweep

    def sweep(self) -> None:
        rng = self.rng
        if self.terms is None:
            self.terms = self._terms(self.d2, self.sigma, self.p0s, self.p0b)
        self.ll = self._loglik(self.terms)
        self.ll_total = float(self.ll[self.z].sum())
        self._metropolis("sigma", self.sigma + rng.normal(0, self.step["sigma"]), 0.0, self.sigma_max)
        self._metropolis("p0s", self.p0s + rng.normal(0, self.step["p0s"]), 0.0, 1.0)
        if self.two:
            self._metropolis("p0b", self.p0b + rng.normal(0, self.step["p0b"]), 0.0, 1.0)
        if self.block is not None:
            self._block_move()
        if self.recording:
            self.history.append((self.sigma, self.p0s, self.p0b))
        # activity centres: independent given everything else, so one vectorised Metropolis step for all
        proposal = self.s + rng.normal(0, self.step["s"], self.s.shape)
        inside = self.space.contains(proposal)
        d2_new = self._d2(proposal)
        terms_new = self._terms(d2_new, self.sigma, self.p0s, self.p0b)
        ll_new = self._loglik(terms_new)
        gain = np.where(self.z, ll_new - self.ll, 0.0)
        take = inside & (np.log(rng.random(self.M)) < gain)
        self.tries["s"] += int(self.z.sum())
        self.accepts["s"] += int((take & self.z).sum())
        self.s[take] = proposal[take]
        self.d2[take] = d2_new[take]
        self.ll[take] = ll_new[take]
        for old, new in zip(self.terms, terms_new):
            if old is not None:
                old[take] = new[take]
        # inclusion: Gibbs for the individuals that hold no capture (ll is then the probability of none)
        free = ~self.has_data()
        logit = math.log(self.psi) - math.log1p(-self.psi) + self.ll
        p_in = 1.0 / (1.0 + np.exp(-logit))
        self.z = np.where(free, rng.random(self.M) < p_in, True)
        n = int(self.z.sum())
        self.psi = float(rng.beta(1 + n, 1 + self.M - n))
        self._id_update()

    def _id_update(self) -> None:
        d, M = self.d, self.M
        if d.n_left == d.n_fixed and d.n_right == d.n_fixed:
            return
        eligible = self.z.copy()
        eligible[: d.n_fixed] = False
        scale = self.prop_scale * self.sigma
        sx, sy = self.s[:, 0:1], self.s[:, 1:2]
        between = (sx - sx.T) ** 2 + (sy - sy.T) ** 2
        q = np.exp(-between / (2.0 * scale * scale)) * eligible[None, :]
        np.fill_diagonal(q, 0.0)
        cumulative = np.cumsum(q, axis=1)
        total = cumulative[:, -1].tolist()
        log_total = [math.log(t) if t > 0 else -math.inf for t in total]
        w1, w2 = self.terms[0], self.terms[1]
        for free, at, owner, y1, y2, partner, banned in (
                (self.free_l, self.at_l, self.owner_l, d.y_left1, d.y_left2, self.owner_r, self.banned_l),
                (self.free_r, self.at_r, self.owner_r, d.y_right1, d.y_right2, self.owner_l, self.banned_r)):
            if free.size == 0:
                continue
            # what each identity's history adds on each individual, over an empty history there
            gains = (y1 @ w1.T + y2 @ w2.T).tolist()
            u = self.rng.random((free.size, 2)).tolist()
            where, holder = at.tolist(), owner.tolist()
            # the other side's identity on each individual (it does not move while this side is updated)
            partners = partner.tolist() if banned else []
            for n, ident in enumerate(free.tolist()):
                a = where[ident]
                if total[a] <= 0.0:
                    continue
                c = min(int(cumulative[a].searchsorted(u[n][0] * total[a], side="right")), M - 1)
                if c == a:
                    continue
                other = holder[c]
                # a swap that would put a rejected pair on one individual has target density 0: refused
                if banned and (partners[c] in banned.get(ident, ()) or
                               (other >= 0 and partners[a] in banned.get(other, ()))):
                    continue
                row = gains[ident]
                delta = row[c] - row[a] + log_total[a] - log_total[c]
                if other >= 0:
                    delta += gains[other][a] - gains[other][c]
                if u[n][1] > 0.0 and math.log(u[n][1]) < delta:
                    where[ident], holder[c], holder[a] = c, ident, other
                    if other >= 0:
                        where[other] = a
            at[:] = where
            owner[:] = holder
        self._gather()

    def linked(self) -> int:
        return int(((self.owner_l >= 0) & (self.owner_r >= 0)).sum())

    def _block_move(self) -> None:
        """sigma and p0 (both p0s where two-camera stations exist) together, along their posterior correlation as the
        warm-up measured it (p0 and sigma trade off: a single-site walk crawls along that ridge)."""
        names = ("sigma", "p0s", "p0b")[: self.block.shape[0]]
        now = np.array([getattr(self, n) for n in names])
        trial = now + self.step["block"] * (self.block @ self.rng.normal(size=now.size))
        self.tries["block"] += 1
        if not (0 < trial[0] < self.sigma_max and np.all((trial[1:] > 0) & (trial[1:] < 1))):
            return
        params = {"sigma": self.sigma, "p0s": self.p0s, "p0b": self.p0b} | dict(zip(names, trial.tolist()))
        terms = self._terms(self.d2, params["sigma"], params["p0s"], params["p0b"])
        new_ll = self._loglik(terms)
        new = float(new_ll[self.z].sum())
        if math.log(self.rng.random()) < new - self.ll_total:
            for n in names:
                setattr(self, n, params[n])
            self.terms, self.ll, self.ll_total = terms, new_ll, new
            self.accepts["block"] += 1

    def learn_block(self) -> None:
        """The block move's shape from the warm-up's latter draws (Haario et al.'s adaptive Metropolis, frozen
        once the warm-up ends)."""
        d = 3 if self.two else 2
        past = np.array(self.history[len(self.history) // 2:])[:, :d]
        if past.shape[0] < 20:
            return
        cov = np.cov(past.T) + np.diag([1e-6 * self.sigma ** 2, 1e-8, 1e-8][:d])
        try:
            self.block = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            return
        self.step["block"] = 2.38 / math.sqrt(d)
        self.tries["block"] = self.accepts["block"] = 0

    def adapt(self) -> None:
        """Scale each random walk towards about 0.3 acceptance (during warm-up only)."""
        for name in self.step:
            if self.tries[name] >= 20:
                rate = self.accepts[name] / self.tries[name]
                self.step[name] *= math.exp(rate - 0.3)
                self.tries[name] = self.accepts[name] = 0


def _station_spacing(xy: np.ndarray) -> float:
    if xy.shape[0] < 2:
        return 1.0
    d2 = ((xy[:, None] - xy[None]) ** 2).sum(axis=2)
    np.fill_diagonal(d2, np.inf)
    return float(np.sqrt(d2.min(axis=1)).mean())


def default_augmentation(data: FlankData) -> int:
    """M: room above every detected identity unlinked, so the posterior of N rarely reaches M."""
    held = data.n_left + data.n_right - data.n_fixed
    return int(max(4 * max(data.n_left, data.n_right), held + 50))


def fit_partial_id(data: FlankData, space: StateSpace, *, chains: int = 3, iterations: int = 20_000,
                   warmup: int | None = None, augmented: int | None = None, seed: int = 0, prop_scale: float = 1.0,
                   rhat_limit: float = RHAT_LIMIT, min_ess: float = MIN_ESS,
                   progress: Callable[[float, str], None] | None = None) -> PartialIdFit:
    """Fit the two-flank partial-identity model: ``chains`` chains of ``iterations`` sweeps each, the first
    ``warmup`` (default a quarter) tuning the random walks and discarded. ``augmented`` is M (default
    :func:`default_augmentation`; raised by half and refitted, at most twice, when N's posterior reaches 90% of M)."""
    if chains < 1 or iterations < 10:
        raise DensityInputError("a fit needs at least one chain of at least 10 iterations")
    total_seen = data.n_left + data.n_right - data.n_fixed
    if total_seen == 0:
        raise DensityInputError("no captures: a density needs photographed animals")
    warm = iterations // 4 if warmup is None else int(warmup)
    if not 0 <= warm < iterations:
        raise DensityInputError(f"the warm-up ({warm}) must be shorter than the chains ({iterations} iterations)")
    if not np.any(space.contains(data.xy)):
        raise DensityInputError("no station lies inside the state space; check that the mask is in the stations' "
                                "metres")
    M = int(augmented or default_augmentation(data))
    if M < total_seen:
        raise DensityInputError(f"M ({M}) is smaller than the identities photographed ({total_seen})")
    report = progress or (lambda fraction, message: None)
    for attempt in range(3):
        fit = _run(data, space, chains=chains, iterations=iterations, warmup=warm, augmented=M, seed=seed,
                   prop_scale=prop_scale, rhat_limit=rhat_limit, min_ess=min_ess, report=report)
        if np.quantile(fit.draws["N"], 0.99) < 0.9 * M or attempt == 2:
            return fit
        M = int(math.ceil(M * 1.5))
        report(0.0, f"N reached the augmentation limit; refitting with M = {M}")
    return fit


def _run(data: FlankData, space: StateSpace, *, chains: int, iterations: int, warmup: int, augmented: int,
         seed: int, prop_scale: float, rhat_limit: float, min_ess: float,
         report: Callable[[float, str], None]) -> PartialIdFit:
    started = time.perf_counter()
    kept = iterations - warmup
    names = ("N", "sigma", "p0S", "p0B", "psi", "linked")
    draws = {k: np.zeros((chains, kept)) for k in names}
    links = np.zeros((data.n_left, data.n_right))
    accept: dict[str, list[float]] = {}
    streams = np.random.SeedSequence(seed).spawn(chains)
    for c in range(chains):
        chain = _Chain(data, space, augmented=augmented, rng=np.random.default_rng(streams[c]),
                       prop_scale=prop_scale)
        for it in range(iterations):
            chain.sweep()
            if it < warmup:
                chain.recording = True
                if it % 50 == 49:
                    chain.adapt()
                if it in (warmup // 2, (3 * warmup) // 4) and warmup >= 100:
                    chain.learn_block()
                if it == warmup - 1:
                    chain.recording = False
                    chain.tries = {k: 0 for k in chain.step}
                    chain.accepts = {k: 0 for k in chain.step}
                continue
            t = it - warmup
            draws["N"][c, t] = chain.z.sum()
            draws["sigma"][c, t] = chain.sigma
            draws["p0S"][c, t] = chain.p0s
            draws["p0B"][c, t] = chain.p0b
            draws["psi"][c, t] = chain.psi
            draws["linked"][c, t] = chain.linked()
            right_of = chain.owner_r[chain.at_l]
            held = right_of >= 0
            links[np.flatnonzero(held), right_of[held]] += 1
            if it % 1000 == 999:
                report((c + (it + 1) / iterations) / chains, f"chain {c + 1} of {chains}: {it + 1:,} iterations")
        for k in chain.step:
            accept.setdefault(k, []).append(chain.accepts[k] / max(chain.tries[k], 1))
    watched = ["N", "sigma", "p0S", "psi"] + (["p0B"] if data.has_two_cameras else [])
    if data.n_left > data.n_fixed and data.n_right > data.n_fixed:
        watched.append("linked")
    rhat = {k: split_rhat(draws[k]) if chains > 1 or kept >= 4 else math.nan for k in watched}
    ess = {k: effective_sample_size(draws[k]) for k in watched}
    area = space.area_km2
    d_draws = draws["N"] / area * 100.0
    refused = None
    worst_r = max(((v, k) for k, v in rhat.items() if math.isfinite(v)), default=(math.nan, ""))
    worst_e = min(((v, k) for k, v in ess.items() if math.isfinite(v)), default=(math.nan, ""))
    if math.isfinite(worst_r[0]) and worst_r[0] > rhat_limit:
        refused = (f"the chains disagree (R-hat of {worst_r[1]} {worst_r[0]:.2f}, above {rhat_limit}): run more "
                   "iterations (--iterations) before reading any figure")
    elif math.isfinite(worst_e[0]) and worst_e[0] < min_ess:
        refused = (f"too few effective draws ({worst_e[0]:.0f} of {worst_e[1]}, under {min_ess:.0f}): run more "
                   "iterations (--iterations) before reading any figure")
    return PartialIdFit(
        n=Posterior.of(draws["N"]), d_per_100km2=Posterior.of(d_draws), p0_single=Posterior.of(draws["p0S"]),
        p0_both=Posterior.of(draws["p0B"]) if data.has_two_cameras else None, sigma_m=Posterior.of(draws["sigma"]),
        linked_pairs=float(draws["linked"].mean()), known_pairs=data.n_fixed, left_names=data.left_names,
        right_names=data.right_names, n_fixed=data.n_fixed, link_probabilities=links / (chains * kept), rhat=rhat,
        ess=ess, chains=chains, iterations=iterations, warmup=warmup, augmented=augmented, area_km2=area,
        seconds=time.perf_counter() - started, acceptance={k: float(np.mean(v)) for k, v in accept.items()},
        draws=draws, refused=refused)


# --------------------------------------------------------------------------- simulation


@dataclass(frozen=True)
class FlankStudy:
    """A simulated study: the stations, the captures as a curator would name them, the truth behind the names."""

    stations: list[FlankStation]
    captures: list[FlankCapture]
    n_population: int
    area_km2: float
    animal_of_left: dict[str, int]
    animal_of_right: dict[str, int]


def simulate_flanks(stations: Sequence[FlankStation], *, n_animals: int, p0_single: float, p0_both: float,
                    sigma_m: float, space: StateSpace, rng: np.random.Generator) -> FlankStudy:
    """``n_animals`` centres uniform over ``space``, photographed as the model assumes; an animal ever seen on both
    sides at once keeps one name (``A..``), the others a left name and a right name numbered at random."""
    xy = np.array([[s.x, s.y] for s in stations])
    n_occ = max(len(s.cameras) for s in stations)
    cams = np.array([s.cameras * n_occ if len(s.cameras) == 1 else s.cameras for s in stations])  # (J, K)
    centres = space.sample(rng, n_animals)
    k = np.exp(-((centres[:, None] - xy[None]) ** 2).sum(axis=2) / (2 * sigma_m ** 2))[:, :, None]  # (N, J, 1)
    ps, pb = p0_single * k, p0_both * k
    one, two = (cams == 1)[None], (cams == 2)[None]
    p_side = np.where(one, ps, np.where(two, 1 - (1 - ps) ** 2, 0.0))
    left = rng.random((n_animals, *cams.shape)) < p_side
    right = rng.random((n_animals, *cams.shape)) < p_side
    both = (rng.random((n_animals, *cams.shape)) < pb) & two
    captures: list[FlankCapture] = []
    named_b = np.flatnonzero(both.any(axis=(1, 2)))
    left_only = [i for i in np.flatnonzero(left.any(axis=(1, 2))) if i not in set(named_b)]
    right_only = [i for i in np.flatnonzero(right.any(axis=(1, 2))) if i not in set(named_b)]
    left_name = {int(i): f"L{n + 1:03d}" for n, i in enumerate(rng.permutation(left_only))}
    right_name = {int(i): f"R{n + 1:03d}" for n, i in enumerate(rng.permutation(right_only))}
    for i in named_b:
        left_name[int(i)] = right_name[int(i)] = f"A{int(i) + 1:03d}"
    names = [s.name for s in stations]
    for code, seen, naming in (("B", both, None), ("L", left, left_name), ("R", right, right_name)):
        for i, j, o in zip(*np.nonzero(seen)):
            name = f"A{int(i) + 1:03d}" if naming is None else naming[int(i)]
            captures.append(FlankCapture(name, int(o) + 1, names[j], code))
    return FlankStudy(stations=list(stations), captures=captures, n_population=n_animals, area_km2=space.area_km2,
                      animal_of_left={v: k_ for k_, v in left_name.items()},
                      animal_of_right={v: k_ for k_, v in right_name.items()})


def grid_stations(columns: int, rows: int, *, spacing_m: float, n_occasions: int, cameras: int = 1,
                  two_camera: Sequence[int] = ()) -> list[FlankStation]:
    """Stations on a grid, ``cameras`` at each on every occasion except those listed in ``two_camera`` (two)."""
    out = []
    for n in range(columns * rows):
        c = 2 if n in set(two_camera) else cameras
        out.append(FlankStation(f"S{n + 1:02d}", float((n % columns) * spacing_m), float((n // columns) * spacing_m),
                                (c,) * n_occasions))
    return out


def write_flank_files(study: FlankStudy, captures: str | Path, traps: str | Path) -> None:
    """The study as the text files ``rosette density --flanks`` reads."""
    lines = ["Session ID Occasion Detector Flank"]
    lines += [f"1 {c.identity} {c.occasion} {c.station} {c.flank}" for c in study.captures]
    Path(captures).write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = ["Detector X Y cameras"]
    n_occ = max(len(s.cameras) for s in study.stations)
    # one digit stands for every occasion only when a capture falls on the last (the reader counts to it)
    compact = max((c.occasion for c in study.captures), default=0) == n_occ
    for s in study.stations:
        code = str(s.cameras[0]) if compact and len(set(s.cameras)) == 1 else "".join(map(str, s.cameras))
        rows.append(f"{s.name} {s.x:g} {s.y:g} {code}")
    Path(traps).write_text("\n".join(rows) + "\n", encoding="utf-8")


def summary_dict(fit: PartialIdFit) -> Mapping[str, Any]:
    """Every figure of a fit as plain JSON values (NaN as None)."""

    def num(x: float | None) -> float | None:
        return None if x is None or not math.isfinite(x) else float(x)

    return {
        "N": fit.n.as_dict(), "D_per_100km2": fit.d_per_100km2.as_dict(), "p0_single": fit.p0_single.as_dict(),
        "p0_both": fit.p0_both.as_dict() if fit.p0_both else None, "sigma_m": fit.sigma_m.as_dict(),
        "linked_pairs": fit.linked_pairs, "known_pairs": fit.known_pairs,
        "rhat": {k: num(v) for k, v in fit.rhat.items()}, "ess": {k: num(v) for k, v in fit.ess.items()},
        "rhat_max": num(fit.rhat_max), "ess_min": num(fit.ess_min), "chains": fit.chains,
        "iterations": fit.iterations, "warmup": fit.warmup, "augmented_M": fit.augmented, "area_km2": fit.area_km2,
        "seconds": fit.seconds, "acceptance": fit.acceptance, "refused": fit.refused,
    }
