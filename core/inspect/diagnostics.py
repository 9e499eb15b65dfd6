"""Shortcut diagnostics of docs/DESIGN.md section 4: context reliance, laterality, flank protocols.

Scores come from :mod:`core.similarity` with the model's own metric: cosine for
Euclidean heads (rows are L2-normalised here first), exp(-d) for Lorentz heads
(rows are points on the hyperboloid), so every score is "higher = more alike".

Boundaries (a value exactly on a boundary goes to the band written on the left):
- risk band of a context ratio r: LOW r < 0.95; MEDIUM 0.95 <= r <= 1.10; HIGH r > 1.10.
- mirror tier of mean mirror_sim m: aware m < 0.85; moderate 0.85 <= m < 0.96;
  strong shortcut 0.96 <= m <= 0.99; symmetric m > 0.99.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from core.metrics import (
    all_vs_all_metrics,
    all_vs_all_valid,
    relevance,
    retrieval_metrics,
    same_sighting_mask,
)
from core.similarity import METRICS, l2_normalize, paired_scores, pairwise_scores

# variant names (docs/DESIGN.md section 4, "Image variants"); bg_silhouette is an alias of background_only
FOREGROUND = "foreground_only"
BACKGROUND_INPAINTED = "background_inpainted"
BACKGROUND_ONLY = "background_only"
BACKGROUND_ONLY_ALIASES = ("background_only", "bg_silhouette")

RISK_LOW_BELOW = 0.95
RISK_HIGH_ABOVE = 1.10
TIER_AWARE_BELOW = 0.85
TIER_STRONG_FROM = 0.96
TIER_SYMMETRIC_ABOVE = 0.99


# --- shared helpers ---------------------------------------------------------------------


def _prepare_embeddings(x: np.ndarray, metric: str) -> np.ndarray:
    """Cosine: L2-normalise rows (idempotent); Lorentz: points as given (float64)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (N x D), got shape {x.shape}")
    return l2_normalize(x) if metric == "cosine" else np.asarray(x, dtype=np.float64)


def scores(queries: np.ndarray, gallery: np.ndarray, *, metric: str = "cosine") -> np.ndarray:
    """Q x G model scores s(q, g): cosine of normalised rows, or exp(-d) on the hyperboloid."""
    return pairwise_scores(
        _prepare_embeddings(queries, metric), _prepare_embeddings(gallery, metric), metric=metric
    )


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None:
        return None
    num, den = float(numerator), float(denominator)
    if math.isnan(num) or math.isnan(den) or den == 0.0:
        return None
    return num / den


# --- Axis 1: context reliance -----------------------------------------------------------


def risk_band(ratio: float | None) -> str | None:
    """'LOW' (< 0.95) | 'MEDIUM' (0.95 - 1.10, inclusive) | 'HIGH' (> 1.10); None for None/NaN."""
    if ratio is None or math.isnan(float(ratio)):
        return None
    if ratio < RISK_LOW_BELOW:
        return "LOW"
    if ratio > RISK_HIGH_ABOVE:
        return "HIGH"
    return "MEDIUM"


def context_reliance(map_by_variant: Mapping[str, float]) -> dict:
    """Axis 1 ratios from the macro mAP of each image variant.

    bg_fg     = mAP(background_inpainted) / mAP(foreground_only)
    bg_sil_fg = mAP(background_only)      / mAP(foreground_only)   ('bg_silhouette' accepted as alias)
    Each ratio is None when a variant is missing or mAP(foreground_only) is 0/NaN; each has a
    risk band (LOW < 0.95 <= MEDIUM <= 1.10 < HIGH).
    """
    fg = map_by_variant.get(FOREGROUND)
    bg = map_by_variant.get(BACKGROUND_INPAINTED)
    bg_sil = next((map_by_variant[k] for k in BACKGROUND_ONLY_ALIASES if k in map_by_variant), None)
    bg_fg = _ratio(bg, fg)
    bg_sil_fg = _ratio(bg_sil, fg)
    return {
        "bg_fg": bg_fg,
        "bg_fg_band": risk_band(bg_fg),
        "bg_sil_fg": bg_sil_fg,
        "bg_sil_fg_band": risk_band(bg_sil_fg),
    }


def map_by_variant(
    embeddings_by_variant: Mapping[str, np.ndarray],
    labels: Sequence,
    *,
    metric: str = "cosine",
    sightings: Sequence | None = None,
    exclude_same_sighting: bool = True,
) -> dict[str, float]:
    """All-vs-all macro mAP of each variant's embeddings (same images, same labels, in order)."""
    out: dict[str, float] = {}
    for name, emb in embeddings_by_variant.items():
        res = all_vs_all_metrics(
            scores(emb, emb, metric=metric),
            labels,
            sightings=sightings,
            exclude_same_sighting=exclude_same_sighting,
        )
        out[name] = res.map_macro
    return out


# --- Axis 2: laterality -----------------------------------------------------------------


#: Mirror tiers as bands (name, low, high, colour) -- the one definition the charts and badges use.
TIER_BANDS: tuple[tuple[str, float, float, str], ...] = (
    ("aware", -1.0, TIER_AWARE_BELOW, "rgba(46, 139, 87, 0.16)"),
    ("moderate", TIER_AWARE_BELOW, TIER_STRONG_FROM, "rgba(218, 165, 32, 0.18)"),
    ("strong shortcut", TIER_STRONG_FROM, TIER_SYMMETRIC_ABOVE, "rgba(230, 97, 0, 0.22)"),
    ("symmetric", TIER_SYMMETRIC_ABOVE, 1.0, "rgba(178, 34, 34, 0.26)"),
)


def tier_colour(mirror_sim: float) -> str:
    """The colour of the tier a mirror similarity falls in (same bands as :func:`mirror_tier`)."""
    name = mirror_tier(mirror_sim)
    return next(colour for tier, _, _, colour in TIER_BANDS if tier == name)


def mirror_tier(mean_mirror_sim: float) -> str:
    """'aware' (< 0.85) | 'moderate' (0.85 - <0.96) | 'strong shortcut' (0.96 - 0.99) | 'symmetric' (> 0.99)."""
    m = float(mean_mirror_sim)
    if math.isnan(m):
        raise ValueError("mirror tier of NaN")
    if m < TIER_AWARE_BELOW:
        return "aware"
    if m < TIER_STRONG_FROM:
        return "moderate"
    if m <= TIER_SYMMETRIC_ABOVE:
        return "strong shortcut"
    return "symmetric"


@dataclass
class LateralityResult:
    """Per-image mirror similarity, nearest other-identity similarity of the flip, and their margin."""

    metric: str
    mirror_sim: np.ndarray = field(repr=False)  # s(x, flip(x)), (N,)
    nn_sim: np.ndarray = field(repr=False)  # max_{y: id(y) != id(x)} s(flip(x), y), NaN if none
    nn_index: np.ndarray = field(repr=False)  # gallery row of that y, -1 if none
    danger_margin: np.ndarray = field(repr=False)  # nn_sim - mirror_sim, > 0 is dangerous
    mirror_sim_mean: float
    mirror_sim_std: float
    tier: str
    danger_margin_positive: int  # number of images with danger_margin > 0

    def to_dict(self, *, per_image: bool = False) -> dict:
        """JSON-friendly summary; with ``per_image`` also the per-image lists (None for NaN)."""
        n = int(self.mirror_sim.size)
        margins = self.danger_margin[~np.isnan(self.danger_margin)]
        out: dict = {
            "metric": self.metric,
            "n_images": n,
            "mirror_sim_mean": float(self.mirror_sim_mean),
            "mirror_sim_std": float(self.mirror_sim_std),
            "mirror_tier": self.tier,
            "danger_margin_positive": int(self.danger_margin_positive),
            "danger_margin_positive_share": (self.danger_margin_positive / margins.size) if margins.size else None,
            "danger_margin_mean": float(margins.mean()) if margins.size else None,
        }
        if per_image:
            def clean(a: np.ndarray) -> list:
                return [None if (isinstance(v, float) and math.isnan(v)) else v for v in a.tolist()]

            out["mirror_sim"] = clean(self.mirror_sim.astype(np.float64))
            out["nn_sim"] = clean(self.nn_sim.astype(np.float64))
            out["nn_index"] = self.nn_index.astype(int).tolist()
            out["danger_margin"] = clean(self.danger_margin.astype(np.float64))
        return out


def laterality(
    embeddings: np.ndarray,
    flipped_embeddings: np.ndarray,
    labels: Sequence,
    *,
    metric: str = "cosine",
    gallery: np.ndarray | None = None,
    gallery_labels: Sequence | None = None,
) -> LateralityResult:
    """Axis 2 on foreground cutouts: how much the model treats an animal and its mirror image alike.

    mirror_sim(x)    = s(x, flip(x))
    nn_sim(x)        = max over gallery images y with id(y) != id(x) of s(flip(x), y)
    danger_margin(x) = nn_sim(x) - mirror_sim(x)  (> 0: the flip looks more like another animal)
    The gallery defaults to ``embeddings`` themselves (with ``labels``).
    """
    x = _prepare_embeddings(embeddings, metric)
    fx = _prepare_embeddings(flipped_embeddings, metric)
    if x.shape != fx.shape:
        raise ValueError(f"embeddings {x.shape} and flipped embeddings {fx.shape} differ")
    labels_arr = np.asarray(labels)
    if labels_arr.shape != (x.shape[0],):
        raise ValueError(f"{labels_arr.shape} labels for {x.shape[0]} images")
    if gallery is None:
        if gallery_labels is not None:
            raise ValueError("gallery_labels given without gallery")
        g, g_labels = x, labels_arr
    else:
        if gallery_labels is None:
            raise ValueError("gallery needs gallery_labels")
        g = _prepare_embeddings(gallery, metric)
        g_labels = np.asarray(gallery_labels)
        if g_labels.shape != (g.shape[0],):
            raise ValueError(f"{g_labels.shape} gallery labels for {g.shape[0]} gallery rows")

    mirror = paired_scores(x, fx, metric=metric).astype(np.float64)
    other = ~relevance(labels_arr, g_labels)
    s = pairwise_scores(fx, g, metric=metric).astype(np.float64)
    masked = np.where(other, s, -np.inf)
    has_other = other.any(axis=1)
    nn_index = np.where(has_other, np.argmax(masked, axis=1) if g.shape[0] else -1, -1)
    nn_sim = np.where(has_other, masked.max(axis=1, initial=-np.inf), np.nan)
    margin = nn_sim - mirror
    return LateralityResult(
        metric=metric,
        mirror_sim=mirror,
        nn_sim=nn_sim,
        nn_index=nn_index.astype(np.int64),
        danger_margin=margin,
        mirror_sim_mean=float(mirror.mean()),
        mirror_sim_std=float(mirror.std()),
        tier=mirror_tier(float(mirror.mean())),
        danger_margin_positive=int(np.sum(margin > 0)),
    )


def mirrored_query_ratio(
    embeddings: np.ndarray,
    flipped_embeddings: np.ndarray,
    labels: Sequence,
    *,
    metric: str = "cosine",
    sightings: Sequence | None = None,
    exclude_same_sighting: bool = True,
) -> dict:
    """Stress test: macro mAP when every query is replaced by its mirror image / regular macro mAP.

    Regular: all-vs-all on s(x_i, x_j). Mirrored: s(flip(x_i), x_j) with the same gallery
    (regular embeddings) and the same exclusions (self, and same sighting when asked).
    """
    x = _prepare_embeddings(embeddings, metric)
    fx = _prepare_embeddings(flipped_embeddings, metric)
    if x.shape != fx.shape:
        raise ValueError(f"embeddings {x.shape} and flipped embeddings {fx.shape} differ")
    valid = all_vs_all_valid(x.shape[0], sightings=sightings, exclude_same_sighting=exclude_same_sighting)
    regular = retrieval_metrics(pairwise_scores(x, x, metric=metric), labels, labels, valid=valid)
    mirrored = retrieval_metrics(pairwise_scores(fx, x, metric=metric), labels, labels, valid=valid)
    return {
        "map_macro_regular": regular.map_macro,
        "map_macro_mirrored": mirrored.map_macro,
        "ratio": _ratio(mirrored.map_macro, regular.map_macro),
        "n_queries": regular.n_queries,
    }


# --- flank protocols --------------------------------------------------------------------

_FLANK_CODES = {"left": 0, "l": 0, "right": 1, "r": 1}


def flank_codes(flanks: Sequence) -> np.ndarray:
    """0 for left ('left'/'L'), 1 for right ('right'/'R'), -1 for anything else (case-insensitive)."""
    return np.array(
        [_FLANK_CODES.get(str(f).strip().lower(), -1) if f is not None else -1 for f in flanks],
        dtype=np.int64,
    )


def flank_masks(
    flanks: Sequence,
    *,
    sightings: Sequence | None = None,
    exclude_same_sighting: bool = False,
) -> dict[str, np.ndarray]:
    """N x N gallery masks: 'within' (same flank, not self), 'cross' (other flank); rows/cols of
    images without a left/right flank are all False; same sighting removed when asked."""
    code = flank_codes(flanks)
    sided = code >= 0
    both = sided[:, None] & sided[None, :]
    same = code[:, None] == code[None, :]
    within = both & same & ~np.eye(code.size, dtype=bool)
    cross = both & ~same
    if sightings is not None and exclude_same_sighting:
        keep = ~same_sighting_mask(sightings)
        within &= keep
        cross &= keep
    return {"within": within, "cross": cross}


def flank_protocols(
    similarity: np.ndarray,
    labels: Sequence,
    flanks: Sequence,
    *,
    sightings: Sequence | None = None,
    exclude_same_sighting: bool = False,
) -> dict:
    """Within-flank (L->L and R->R pooled, self excluded) and cross-flank (L->R and R->L) retrieval.

    Queries and gallery are the left/right images only; a cross-flank query's gallery holds only
    the other flank, so query and gallery are disjoint. cross_within_ratio = cross macro mAP /
    within macro mAP (None when undefined). ``query_index`` of the results indexes the full set.
    """
    sim = np.asarray(similarity)
    n = sim.shape[0]
    if sim.shape != (n, n) or len(labels) != n or len(flanks) != n:
        raise ValueError("flank protocols need an N x N matrix and N labels and flanks")
    masks = flank_masks(flanks, sightings=sightings, exclude_same_sighting=exclude_same_sighting)
    code = flank_codes(flanks)
    sided = np.flatnonzero(code >= 0)
    labels_arr = np.asarray(labels)
    sub = sim[np.ix_(sided, sided)]
    out: dict = {"n_left": int(np.sum(code == 0)), "n_right": int(np.sum(code == 1))}
    results = {}
    for name in ("within", "cross"):
        valid = masks[name][np.ix_(sided, sided)]
        res = retrieval_metrics(sub, labels_arr[sided], labels_arr[sided], valid=valid)
        res.query_index = sided[res.query_index]
        results[name] = res
        out[f"{name}_flank"] = res.to_dict()
    out["cross_within_ratio"] = _ratio(results["cross"].map_macro, results["within"].map_macro)
    return out


# --- a benchmark's diagnosis, and one photo's -------------------------------------------

#: The variants a benchmark diagnosis embeds (``background_inpainted`` once per inpainting seed).
DIAGNOSTIC_VARIANTS = ("full_rgb", "foreground_only", "background_only", "background_inpainted", "silhouette", "mirror")
#: Key of the embeddings of ``background_inpainted`` made with one seed: ``background_inpainted@<seed>``.
INPAINTED_AT = BACKGROUND_INPAINTED + "@"


def diagnose_embeddings(
    embeddings: Mapping[str, np.ndarray],
    labels: Sequence,
    flanks: Sequence,
    *,
    metric: str = "cosine",
    sightings: Sequence | None = None,
) -> dict:
    """The figures of a benchmark diagnosis from each variant's embeddings of the same photos (in order):
    macro mAP by variant (``background_inpainted@<seed>`` averaged over the seeds), Axis 1 context reliance,
    Axis 2 laterality and the mirrored-query ratio on foreground cutouts, and the flank protocols on whole
    photos without and with same-sighting photos. ``per_image`` holds the per-photo laterality numbers."""
    per_seed = {k: v for k, v in embeddings.items() if k.startswith(INPAINTED_AT)}
    plain = {k: v for k, v in embeddings.items() if not k.startswith(INPAINTED_AT)}
    maps = map_by_variant(plain, labels, metric=metric, sightings=sightings)
    bg_maps = map_by_variant(per_seed, labels, metric=metric, sightings=sightings)
    maps[BACKGROUND_INPAINTED] = float(np.mean(list(bg_maps.values())))
    axis1 = context_reliance(maps)
    lat = laterality(embeddings[FOREGROUND], embeddings["mirror"], labels, metric=metric)
    mq = mirrored_query_ratio(embeddings[FOREGROUND], embeddings["mirror"], labels, metric=metric,
                              sightings=sightings)
    sim_full = pairwise_scores(embeddings["full_rgb"], embeddings["full_rgb"], metric=metric)
    flank_res = flank_protocols(sim_full, labels, flanks, sightings=sightings, exclude_same_sighting=True)
    flanks_with = flank_protocols(sim_full, labels, flanks, sightings=sightings, exclude_same_sighting=False)
    lat_d = lat.to_dict(per_image=True)
    return {
        "bg_fg": axis1["bg_fg"], "bg_fg_band": axis1["bg_fg_band"],
        "bg_sil_fg": axis1["bg_sil_fg"], "bg_sil_fg_band": axis1["bg_sil_fg_band"],
        "map_macro_by_variant": maps,
        "map_macro_background_inpainted_by_seed": {k.split("@")[1]: v for k, v in bg_maps.items()},
        "mirror_sim_mean": lat_d["mirror_sim_mean"], "mirror_sim_std": lat_d["mirror_sim_std"],
        "mirror_tier": lat_d["mirror_tier"], "danger_margin_positive": lat_d["danger_margin_positive"],
        "mirrored_query_ratio": mq.get("ratio") if isinstance(mq, dict) else mq,
        "mirrored_query": mq,
        "within_flank": flank_res["within_flank"], "cross_flank": flank_res["cross_flank"],
        "cross_within_ratio": flank_res.get("cross_within_ratio"),
        "within_flank_with_same_sighting": flanks_with["within_flank"],
        "cross_flank_with_same_sighting": flanks_with["cross_flank"],
        "per_image": {k: lat_d[k] for k in ("mirror_sim", "nn_sim", "nn_index", "danger_margin") if k in lat_d},
    }


def own_variant_scores(variant_embeddings: Mapping[str, np.ndarray], gallery: np.ndarray, *,
                       metric: str = "cosine") -> dict[str, float]:
    """own_score(v) = max over the gallery rows y of s(e_v(x), y): how strongly each variant of one photo x
    alone still points to its own individual (the gallery: whole photos of that individual)."""
    names = list(variant_embeddings)
    sim = scores(np.stack([variant_embeddings[v] for v in names]), gallery, metric=metric)
    return {v: float(sim[k].max()) for k, v in enumerate(names)}


def photo_mirror_check(
    foreground: np.ndarray,
    mirror: np.ndarray,
    query_label: str,
    *,
    metric: str = "cosine",
    gallery: np.ndarray | None = None,
    gallery_labels: Sequence | None = None,
) -> tuple[float, float | None, float | None, int | None]:
    """(mirror_sim, nn_sim, danger_margin, nn_index) of one photo: s(e_fg(x), e_mirror(x)), and with a gallery of
    other individuals the best score of the mirrored photo against it (None, None, None without a gallery)."""
    if gallery is None:
        return float(scores(foreground[None], mirror[None], metric=metric)[0, 0]), None, None, None
    lat = laterality(foreground[None], mirror[None], [query_label], metric=metric, gallery=gallery,
                     gallery_labels=gallery_labels)
    return float(lat.mirror_sim[0]), float(lat.nn_sim[0]), float(lat.danger_margin[0]), int(lat.nn_index[0])
