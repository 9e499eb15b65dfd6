"""What the Diagnostics tab shows for one photo: its six image variants with, for each, the model's score against
the photo's own individual, and the mirror check (mirror similarity, the nearest other individual of the mirrored
photo, danger margin) (:func:`diagnose_image`); and whether its best global match rests on the coat, checked by
matched spots (:func:`spot_evidence_check`). Read-only: nothing is stored."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import select

from core.identify.backbones import DEFAULT_BACKBONE
from core.inspect.inpainting import InpainterNotConfiguredError, create_inpainter, default_inpainter_name
from core.registry import UnknownComponentError
from core.identify.spots.pipeline import PipelineSettings
from core.identify.spots.verify import SpotStatus
from core.inspect.variants import VARIANTS
from db.inspect.diagnostics import diagnose_photo
from db.embeddings import get_backbone
from db.identify.matching import rank_candidates
from db.models import Image, Individual
from db.session import Catalogue
from db.identify.spots import get_matcher, load_pipeline, verify_candidates
from jobs.actions.diagnostic_words import (
    VARIANT_HELP,
    VARIANT_WORDS,
    describe_inpainter,
    describe_mask_source,
    fmt,
    tip,
    weights_label,
)


def _create_inpainter(name: str | None) -> Any:
    try:
        return create_inpainter(name or default_inpainter_name())
    except (InpainterNotConfiguredError, UnknownComponentError) as exc:
        raise ValueError(str(exc)) from None


def _backbone(cat: Catalogue, name: str | Any) -> Any:
    """A backbone by registry name (built once per process), or an already-built backbone object."""
    if not isinstance(name, str):
        return name
    try:
        return get_backbone(cat, name)
    except UnknownComponentError as exc:
        raise ValueError(str(exc)) from None


def _config_dict(model: Any) -> dict[str, Any]:
    cfg = getattr(model, "config", None)
    if cfg is None:
        return {"name": str(getattr(model, "name", type(model).__name__))}
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)


@dataclass
class VariantView:
    """One image variant of the diagnosed photo and its score against the photo's own individual."""

    variant: str
    picture: np.ndarray = field(repr=False)
    own_score: float | None  # max similarity to the other photos of the same individual (full photos)

    @property
    def caption(self) -> str:
        """Short gallery caption: the score first, so it is never cut off."""
        return f"{fmt(self.own_score)} · {VARIANT_WORDS[self.variant]}"


@dataclass
class ImageDiagnosis:
    """Everything the single-photo diagnostics panel shows; see :func:`diagnose_image`."""

    image_id: int
    name: str
    individual: str | None
    variants: list[VariantView]
    mirror_sim: float
    nn_sim: float | None
    danger_margin: float | None
    nn_image_id: int | None
    nn_individual: str | None
    nn_thumb: str | None  # absolute path
    own_gallery: int  # photos of the own individual compared against
    own_same_sighting_included: bool
    other_gallery: int  # photos of other individuals compared against
    other_cutouts: int  # of those, how many were compared as cut-outs (they have a mask)
    provenance: dict[str, Any]

    @property
    def dangerous(self) -> bool:
        return self.danger_margin is not None and self.danger_margin > 0

    def verdict(self) -> str:
        if self.danger_margin is None:
            return "There is no other individual in the catalogue to compare the mirrored photo with."
        who = self.nn_individual or f"photo #{self.nn_image_id}"
        if self.dangerous:
            return (f"⚠ The mirrored photo looks more like {who} than like itself "
                    f"(by {self.danger_margin:.3f}): the model may confuse this animal's flanks with {who}.")
        return (f"The mirrored photo still looks more like itself than like any other individual "
                f"(closest: {who}, {-self.danger_margin:.3f} below).")

    def provenance_text(self) -> str:
        p = self.provenance
        return (f"model {p['model']} ({p['weights']}); score {p['metric']}; masker {p['masker']}; "
                f"inpainter {p['inpainter']} seed {p['seed']}")


def diagnose_image(cat: Catalogue, image_id: int, *, backbone: str | Any = DEFAULT_BACKBONE,
                   inpainter: str | None = None, seed: int = 0,
                   progress: Callable[[float, str], None] | None = None) -> ImageDiagnosis:
    """Variants, own-individual scores and the mirror check of one masked photo, in curators' words
    (the numbers come from :func:`db.inspect.diagnostics.diagnose_photo`, where their formulas are)."""
    model = _backbone(cat, backbone)
    inp = _create_inpainter(inpainter)

    def report(frac: float, msg: str) -> None:
        if progress:
            progress(frac, VARIANT_WORDS.get(msg, msg) + (f" ({msg})" if msg in VARIANT_WORDS else ""))

    d = diagnose_photo(cat, int(image_id), model=model, inpainter=inp, seed=seed, progress=report)
    cfg = _config_dict(model)
    return ImageDiagnosis(
        image_id=d.image_id, name=d.name, individual=d.individual,
        variants=[VariantView(v, d.pictures[v], d.own_scores[v]) for v in VARIANTS],
        mirror_sim=d.mirror_sim, nn_sim=d.nn_sim, danger_margin=d.danger_margin,
        nn_image_id=d.nn_image_id, nn_individual=d.nn_individual, nn_thumb=d.nn_thumb,
        own_gallery=d.own_gallery, own_same_sighting_included=d.own_same_sighting_included,
        other_gallery=d.other_gallery, other_cutouts=d.other_cutouts,
        provenance={"model": cfg.get("name", str(backbone)), "weights": weights_label(cfg), "metric": d.metric,
                    "masker": describe_mask_source(d.mask_source, d.mask_details),
                    "mask_source": d.mask_source, "inpainter": f"{inp.name}: {describe_inpainter(inp.name)}",
                    "inpainter_config": dict(inp.config), "seed": seed, "model_config": cfg},
    )


def masked_image_choices(cat: Catalogue) -> list[tuple[str, int]]:
    """(label, id) of the photos that have a mask (only those can be diagnosed)."""
    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.id, Image.original_name, Individual.name, Image.mask_source)
                         .outerjoin(Individual, Image.individual_id == Individual.id)
                         .where(Image.mask_path.is_not(None)).order_by(Image.id)).all()
    return [(f"#{i} · {name} · {ind or 'no individual yet'} · mask: {src}", i) for i, name, ind, src in rows]


def image_diagnosis_markdown(d: ImageDiagnosis) -> str:
    """The numbers block of the single-photo panel (curator words, ML terms and provenance on hover)."""
    prov = html.escape(d.provenance_text(), quote=True)

    def num(x: float | None, extra: str = "") -> str:
        return f'<span class="diag-number" title="{prov}{html.escape(extra, quote=True)}">{fmt(x)}</span>'

    own = "the whole photos" if not d.own_same_sighting_included else "whole photos (same sighting only)"
    own_help = ("own_score(v) = max over the other photos y of the same individual of s(variant v of this photo, "
                "full_rgb of y); photos of the same sighting are left out when others exist")
    table = ["| Version of the photo | " + tip("Likeness to its own individual", own_help) + " |", "|---|---:|"]
    for view in d.variants:
        table.append(f"| {tip(VARIANT_WORDS[view.variant], VARIANT_HELP[view.variant])} | "
                     f"{num(view.own_score, '; variant ' + view.variant + ' vs full_rgb of the own individual')} |")
    if d.own_gallery == 0:
        table.append("| *(no other photo of this individual to compare with)* | |")
    lines = [
        f"### Photo #{d.image_id} · {html.escape(d.name)} · {html.escape(d.individual or 'no individual yet')}",
        f"**{html.escape(d.verdict())}**",
        "",
        f"- {tip('Likeness to its own mirror image', 'mirror similarity: s(foreground cut-out, its horizontal flip)')}: "
        f"{num(d.mirror_sim, '; variants foreground_only vs mirror')}",
        f"- {tip('Likeness of the mirrored photo to the closest other individual', 'nn_sim: max over other identities y of s(flip(x), y)')}: "
        f"{num(d.nn_sim, '; variant mirror vs foreground_only / full_rgb gallery')}"
        + (f" ({html.escape(d.nn_individual or '')}, photo #{d.nn_image_id})" if d.nn_image_id else ""),
        f"- {tip('Danger margin', 'danger_margin = nn_sim - mirror_sim; > 0 means the flip looks more like another animal')}: "
        f"{num(d.danger_margin)}",
        f"- Compared with {d.own_gallery} other photo(s) of the same individual ({own}) and "
        f"{d.other_gallery} photo(s) of other individuals, {d.other_cutouts} of them as cut-outs"
        + ("" if d.other_cutouts == d.other_gallery else
           " (the rest have no mask and were compared as whole photos; mask them for a fair check)") + ".",
        f"- <span title=\"{prov}\">Made with {html.escape(d.provenance['model'])}; "
        f"background filled by {html.escape(d.provenance['inpainter'])}; mask by "
        f"{html.escape(d.provenance['masker'])}.</span>",
        "",
        *table,
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- spot evidence

SPOT_CHECK_CANDIDATES = 5  # candidates verified (cheap: 5 pairs)
SPOT_CHECK_MATCHER = "sift"
FEW_SPOTS = 8  # fewer matched spots than this with the best match: the score rests on something else


@dataclass
class SpotCheckRow(SpotStatus):
    """One of the photo's top candidates by the global model, with its matched spots."""

    rank: int
    image_id: int
    individual: str
    flank: str
    score: float  # the global model's score
    inliers: int
    status: str  # core.identify.spots.verify.STATUS_WORDS key (``words`` and ``has_evidence`` come from SpotStatus)


@dataclass
class SpotCheck:
    """Does the photo's best global match rest on the coat? (:func:`spot_evidence_check`)"""

    image_id: int
    model: str
    matcher: str
    n_keypoints: int
    masked: bool
    enough_keypoints: bool
    rows: list[SpotCheckRow]
    warning: str | None  # a plain sentence when the best match has almost no spot evidence (or none can be had)
    summary: str  # one sentence, always


def spot_evidence_check(cat: Catalogue, image_id: int, *, model: str = DEFAULT_BACKBONE,
                        k: int = SPOT_CHECK_CANDIDATES, matcher: str = SPOT_CHECK_MATCHER,
                        few: int = FEW_SPOTS) -> SpotCheck:
    """Verify the photo's top-``k`` candidates by the global ``model`` with the ``matcher``'s keypoints (opposite
    flanks are not compared) and say in a plain sentence when the best match shares almost no spots with it:
    the model may then be matching the background or the pose rather than the coat."""
    pipeline = load_pipeline(cat, model)
    global_model = pipeline.global_model if pipeline is not None else model  # a pipeline: its global model ranks
    image_id = int(image_id)
    result = rank_candidates(cat, image_id, model_name=global_model, k=k)
    settings = PipelineSettings(matcher=matcher)
    cands = result.candidates[:k]
    m = get_matcher(matcher)
    feats, checks = verify_candidates(cat, image_id, [c.image_id for c in cands], matcher=m, settings=settings)
    fq = feats[0]
    out = []
    for c, v in zip(cands, checks):
        out.append(SpotCheckRow(rank=c.rank, image_id=c.image_id, individual=c.individual_name, flank=c.flank,
                                score=float(c.score), inliers=int(v.n_inliers), status=v.status))
    enough = fq.enough(settings.min_keypoints)
    warning = None
    if not enough:
        warning = (f"No spot evidence on this photo (too few keypoints: tiny, blurred or blank): only {fq.n} "
                   f"keypoint{'' if fq.n == 1 else 's'} found, so its matches rest on the global model alone.")
        summary = warning
    elif not out:
        summary = "There is no candidate in the gallery to check the spots against."
    else:
        top = out[0]
        who = f"{top.individual}, photo #{top.image_id}"
        if not top.has_evidence:
            summary = (f"The best match ({who}, score {top.score:.2f}) shows the opposite flank: its spots cannot "
                       "be compared with this photo's.")
        elif top.inliers < few:
            shared = ("no matched spots" if top.inliers == 0 else
                      f"only {top.inliers} matched spot{'' if top.inliers == 1 else 's'}")
            warning = (f"The best match (score {top.score:.2f}) shares {shared} with this photo: the model may be "
                       "matching the background or the pose, not the coat.")
            better = [r for r in out[1:] if r.has_evidence and r.inliers >= max(few, 2 * top.inliers + 1)]
            if better:
                b = max(better, key=lambda r: r.inliers)
                warning += (f" Candidate {b.rank} ({b.individual}, score {b.score:.2f}) shares {b.inliers} "
                            "matched spots.")
            summary = warning
        else:
            summary = (f"The best match ({who}, score {top.score:.2f}) shares {top.inliers} matched spots with this "
                       "photo: the coat pattern supports it.")
        if not fq.masked:
            summary += " (This photo has no mask: its spots come from the whole photo, background included.)"
    return SpotCheck(image_id=image_id, model=global_model, matcher=m.config.name, n_keypoints=fq.n,
                     masked=fq.masked, enough_keypoints=enough, rows=out, warning=warning, summary=summary)


def spot_check_markdown(check: SpotCheck) -> str:
    """The spot-evidence block of the single-photo panel: the sentence and each candidate's matched spots."""
    help_text = (f"matched spots = inliers: keypoint correspondences ({check.matcher}) that one geometric transform "
                 f"(homography, USAC/MAGSAC++) explains; candidates ranked by {check.model}")
    lines = [f"#### Spot evidence · top {len(check.rows)} candidates by {html.escape(check.model)}",
             f"**{'⚠ ' if check.warning else ''}{html.escape(check.summary)}**", "",
             f"This photo: {check.n_keypoints} keypoints ({check.matcher}"
             f"{', on its mask' if check.masked else ', whole photo: no mask'}).", ""]
    if check.rows:
        lines += ["| Rank | Individual | Photo | Score | " + tip("Matched spots", help_text) + " | Spot check |",
                  "|---:|---|---:|---:|---:|---|"]
        for r in check.rows:
            lines.append(f"| {r.rank} | {html.escape(r.individual)} | #{r.image_id} | {r.score:.3f} | "
                         f"{r.inliers if r.has_evidence else '—'} | {html.escape(r.words)} |")
    return "\n".join(lines)

