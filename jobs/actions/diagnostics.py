"""What the Diagnostics tab calls: a few lines each over ``db`` and ``core`` (the Mask tab's are in
``jobs.actions.masks``).

Diagnostics tab, one photo (:func:`diagnose_image`): the six image variants of
the photo with, for each, the model's score against the photo's own individual,
and the mirror check (mirror similarity, the nearest other individual of the
mirrored photo, danger margin). Diagnostics tab, one model on one benchmark:
:func:`submit_diagnose` queues a ``diagnose`` job; :func:`load_diagnosis` reads a
stored result and the ``*_figure`` / :func:`flank_rows` functions draw it.

Words are for curators; the ML term goes in a tooltip (``<abbr title=...>``),
and every number carries its provenance (model, weights, variant, masker,
inpainter + seed) in a hover text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import select

from core.backbones import DEFAULT_BACKBONE
from jobs.actions.catalogue import curator_name
from core.spots.verify import SpotStatus
from db.models import Image, Individual
from db.session import Catalogue


#: Curator words for each image variant (the registry name goes in the tooltip).
VARIANT_WORDS: dict[str, str] = {
    "full_rgb": "Whole photo",
    "foreground_only": "Animal only",
    "background_only": "Background with animal-shaped hole",
    "background_inpainted": "Background, animal painted out",
    "silhouette": "Outline only",
    "mirror": "Animal mirrored",
}
VARIANT_HELP: dict[str, str] = {
    "full_rgb": "full_rgb: the photo as it is",
    "foreground_only": "foreground_only: background set to black, only the animal's pixels kept",
    "background_only": "background_only (bg_silhouette): animal set to black; the hole keeps its silhouette",
    "background_inpainted": "background_inpainted: the animal's convex hull removed and filled in by the inpainter",
    "silhouette": "silhouette: the binary mask in white on black",
    "mirror": "mirror: horizontal flip of the animal cut-out",
}
FLAG_WORDS: dict[str, tuple[str, str]] = {
    "empty": ("No animal was found: the mask is empty.", "empty mask (0 foreground pixels)"),
    "full_frame": ("The whole photo was taken as the animal.", "full-frame mask: foreground >= 95 % of the frame"),
    "multi_component": ("The mask is in several separate pieces.",
                        "multi-component mask: more than one 8-connected component holding >= 1 % of the mask"),
    "short_of_box": ("The mask stops well short of the box you drew: head, neck, legs or tail are likely missing.",
                     "partial mask: its bounding box spans < 75 % of the drawn box's width or height"),
    "misses_clicks": ("A click on the animal lies outside the mask: part of the animal is likely missing.",
                      "an animal click (label 1) falls on a background pixel of the mask"),
}
TIER_WORDS: dict[str, str] = {
    "aware": "tells an animal from its mirror image (left and right flanks look different to it)",
    "moderate": "partly tells an animal from its mirror image",
    "strong shortcut": "hardly tells an animal from its mirror image (left and right flanks look alike to it)",
    "symmetric": "cannot tell an animal from its mirror image at all",
}
from core.diagnostics import TIER_BANDS  # noqa: E402  (one definition of the tier bands and colours)

BAND_WORDS: dict[str, str] = {
    "LOW": "low risk: the animal's coat carries more of the identification than the background",
    "MEDIUM": "medium risk: the background alone identifies animals about as well as the coat",
    "HIGH": "high risk: the background alone identifies animals better than the coat",
}
FLANK_HEADERS = ["Comparison", "Average precision per animal", "Average precision per photo",
                 "Right first", "Right in top 5", "Right in top 10", "Photos asked"]


def tip(text: str, term: str) -> str:
    """``text`` with the ML term ``term`` as a hover tooltip (HTML ``<abbr>``, survives Gradio's sanitiser)."""
    return f'<abbr title="{html.escape(term, quote=True)}">{html.escape(text)}</abbr>'


def fmt(x: float | None, digits: int = 3) -> str:
    """A number for display; an em dash for missing / NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits}f}"


# =========================================================================== components


def masker_in_use() -> tuple[str, str]:
    """(registry name, sentence for curators) of the masker the Mask tab runs: SAM 2 if configured, else GrabCut."""
    import os

    from core.masking import SAM2_CHECKPOINT_ENV, default_masker_name

    name = default_masker_name()
    if name == "sam2":
        ckpt = os.path.basename(os.environ.get(SAM2_CHECKPOINT_ENV, "").strip())
        return name, f"SAM 2 (Segment Anything 2, checkpoint {ckpt})"
    return name, "GrabCut (classical, no SAM 2 checkpoint configured)"


def describe_mask_source(source: str | None, details: dict[str, Any] | None = None) -> str:
    """Who made a mask, in words: ``GrabCut (classical ...)``, ``SAM 2 (checkpoint ...)`` or ``the file's alpha``."""
    details = details or {}
    if not source:
        return "no mask yet"
    if source == "grabcut":
        from core.masking import sam2_checkpoint_configured

        return "GrabCut (classical)" if sam2_checkpoint_configured() else \
            "GrabCut (classical, no SAM 2 checkpoint configured)"
    if source == "sam2":
        ckpt = details.get("checkpoint") or "?"
        return f"SAM 2 (Segment Anything 2, checkpoint {str(ckpt).rsplit('/', 1)[-1]})"
    if source == "alpha":
        return "the photo file's own transparency (alpha channel)"
    return source


def backbone_names(cat: Catalogue | None = None) -> list[str]:
    """Models offered in the UI: the offline default first, then trained models of ``cat``, then the rest."""
    try:
        from core.backbones import list_backbones
    except ImportError:
        return [DEFAULT_BACKBONE, "sift_vlad"]
    from core.backbones import weights_available

    names = sorted((n for n in list_backbones() if not n.endswith(":") and weights_available(n)),
                   key=lambda n: (n != DEFAULT_BACKBONE, n))
    if cat is None:
        return names
    from db.species import active_model_name
    from db.training import trained_model_names

    ordered = names[:1] + trained_model_names(cat) + names[1:]
    active = active_model_name(cat)  # the active model first: the default pick
    return [active] + [n for n in ordered if n != active]


def masker_names() -> list[str]:
    from core.masking import list_maskers

    return [n for n in list_maskers() if n != "alpha"]


def inpainter_names() -> list[str]:
    from core.inpainting import list_inpainters

    return list_inpainters()


def describe_inpainter(name: str) -> str:
    """Which inpainter fills the background, in words (OpenCV Telea unless diffusers is configured)."""
    import os

    from core.inpainting import INPAINT_MODEL_ENV

    if name == "opencv":
        return "OpenCV Telea (classical, no diffusion model configured)" \
            if not os.environ.get(INPAINT_MODEL_ENV, "").strip() else "OpenCV Telea (classical)"
    if name == "diffusers":
        return f"diffusion model {os.environ.get(INPAINT_MODEL_ENV, '').strip() or '(not configured)'}"
    return name


def _create_inpainter(name: str | None) -> Any:
    from core.inpainting import InpainterNotConfiguredError, create_inpainter, default_inpainter_name
    from core.registry import UnknownComponentError

    try:
        return create_inpainter(name or default_inpainter_name())
    except (InpainterNotConfiguredError, UnknownComponentError) as exc:
        raise ValueError(str(exc)) from None


def _backbone(cat: Catalogue, name: str | Any) -> Any:
    """A backbone by registry name (built once per process), or an already-built backbone object."""
    if not isinstance(name, str):
        return name
    from core.registry import UnknownComponentError
    from db.embeddings import get_backbone

    try:
        return get_backbone(cat, name)
    except UnknownComponentError as exc:
        raise ValueError(str(exc)) from None


def _config_dict(model: Any) -> dict[str, Any]:
    cfg = getattr(model, "config", None)
    if cfg is None:
        return {"name": str(getattr(model, "name", type(model).__name__))}
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)


def weights_label(model_config: dict[str, Any]) -> str:
    """The weights part of a backbone config in one line (source and the start of the sha256)."""
    source = model_config.get("weights") or model_config.get("weight_source") or model_config.get("weights_source")
    sha = model_config.get("weights_sha256") or model_config.get("checkpoint_hash")
    parts = [str(source)] if source else []
    if sha:
        parts.append(f"sha256 {str(sha)[:12]}")
    return ", ".join(parts) or "weights not recorded"


# =========================================================================== Diagnostics: one photo


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
    (the numbers come from :func:`db.diagnostics.diagnose_photo`, where their formulas are)."""
    from core.variants import VARIANTS
    from db.diagnostics import diagnose_photo

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


# =========================================================================== Diagnostics: one photo's spot evidence

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
    status: str  # core.spots.verify.STATUS_WORDS key (``words`` and ``has_evidence`` come from SpotStatus)


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
    from core.spots.pipeline import PipelineSettings
    from db.matching import rank_candidates
    from db.spots import get_matcher, load_pipeline, verify_candidates

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


# =========================================================================== Diagnostics: model on a benchmark


def benchmark_names(cat: Catalogue) -> list[str]:
    from db.benchmarks import list_benchmarks

    with cat.unit_of_work() as s:
        return [b.name for b in list_benchmarks(s)]


def create_catalogue_benchmark(cat: Catalogue, name: str, *, split: str = "identity", user: str) -> str:
    """Freeze every photo assigned to an individual into a named benchmark (seeded split)."""
    from db.benchmarks import create_benchmark

    user = curator_name(user)
    name = (name or "").strip()
    if not name:
        raise ValueError("Give the benchmark a name.")
    bench = create_benchmark(cat, name, split=split, user=user)
    cfg = bench.config
    return (f"Benchmark {bench.name} frozen: {cfg['n_images']} photos of {cfg['n_identities']} individuals, "
            f"{cfg['n_test']} photos of {cfg['n_test_identities']} individuals set aside for testing.")


def parse_seeds(text: str | Sequence[int] | None) -> tuple[int, ...]:
    """``"0, 1, 2"`` -> (0, 1, 2); empty -> (0,)."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return (0,)
    if not isinstance(text, str):
        return tuple(int(x) for x in text)
    try:
        seeds = tuple(int(p) for p in text.replace(";", ",").replace(" ", ",").split(",") if p.strip())
    except ValueError:
        raise ValueError(f"Seeds must be whole numbers separated by commas, e.g. 0, 1, 2 (got {text!r}).") from None
    if not seeds or any(s < 0 for s in seeds):
        raise ValueError("Give at least one seed, each 0 or more.")
    return tuple(dict.fromkeys(seeds))


def submit_diagnose(cat: Catalogue, *, backbone: str, benchmark: str, masker: str | None, inpainter: str | None,
                    seeds: str | Sequence[int] | None, user: str) -> tuple[int, str]:
    """Queue a ``diagnose`` job (runs in the worker, shows in the Jobs tab); returns (job id, message)."""
    from jobs.queue import submit

    user = curator_name(user)
    if not benchmark:
        raise ValueError("Choose a benchmark first (or freeze one from the catalogue below).")
    if benchmark not in benchmark_names(cat):
        raise ValueError(f"There is no benchmark named {benchmark!r}.")
    seed_list = list(parse_seeds(seeds))
    params = {"backbone": backbone or DEFAULT_BACKBONE, "benchmark": benchmark, "masker": masker or None,
              "inpainter": inpainter or None, "seeds": seed_list, "user": user}
    job_id = submit(cat, "diagnose", params)
    return job_id, (f"Queued job #{job_id}: diagnose {params['backbone']} on {benchmark} "
                    f"(masker {masker or masker_in_use()[0]}, inpainter {inpainter or 'default'}, seeds {seed_list}). "
                    "Follow it in the Jobs tab; the charts appear here when it has finished.")


@dataclass
class DiagnosisView:
    """One stored ``diagnose`` evaluation."""

    evaluation_id: int
    model: str
    benchmark: str
    created: str
    masker: str | None
    inpainter: str | None
    metrics: dict[str, Any] = field(repr=False)
    model_config: dict[str, Any] = field(repr=False)

    @property
    def label(self) -> str:
        return f"#{self.evaluation_id} · {self.model} on {self.benchmark} · {self.created}"

    def provenance(self, variant: str | None = None) -> str:
        """Model, weights, variant, masker, inpainter + seeds in one line (hover text)."""
        seeds = self.metrics.get("seeds")
        parts = [f"model {self.model} ({weights_label(self.model_config)})", f"benchmark {self.benchmark}"]
        if variant:
            parts.append(f"variant {variant}")
        parts.append(f"masker {self.masker or self.metrics.get('masker') or '?'}")
        parts.append(f"inpainter {self.metrics.get('inpainter', self.inpainter)} seeds {seeds}")
        parts.append(f"score {self.metrics.get('metric', 'cosine')}; evaluation #{self.evaluation_id}")
        return "; ".join(parts)


def diagnosis_choices(cat: Catalogue) -> list[tuple[str, int]]:
    """(label, evaluation id) of stored diagnose runs, newest first."""
    from db.evaluation import list_evaluations

    return [(_view(e).label, e.id) for e in list_evaluations(cat, kind="diagnose")]


def _view(e: Any) -> DiagnosisView:
    created = e.created_at.strftime("%Y-%m-%d %H:%M") if e.created_at else ""
    return DiagnosisView(evaluation_id=e.id, model=e.model_name, benchmark=e.benchmark_name or "?", created=created,
                         masker=e.masker, inpainter=e.inpainter, metrics=dict(e.metrics or {}),
                         model_config=dict(e.model_config or {}))


def load_diagnosis(cat: Catalogue, evaluation_id: int | None = None) -> DiagnosisView | None:
    """A stored diagnose evaluation (the newest when ``evaluation_id`` is None); None if there is none."""
    from db.evaluation import list_evaluations
    from db.models import Evaluation

    if evaluation_id is None:
        found = list_evaluations(cat, kind="diagnose", limit=1)
        return _view(found[0]) if found else None
    with cat.unit_of_work() as s:
        e = s.get(Evaluation, int(evaluation_id))
        if e is None or e.kind != "diagnose":
            raise ValueError(f"There is no stored diagnosis #{evaluation_id}.")
        return _view(e)


def context_sentence(m: dict[str, Any]) -> str | None:
    """The two background ratios read together, in one sentence a curator can act on (they can disagree:
    BG/FG paints the animal out, BG+Sil/FG leaves its outline in, so their gap is what the outline tells)."""
    bg, sil = m.get("bg_fg"), m.get("bg_sil_fg")
    if bg is None or sil is None:
        return None
    band, sil_band = m.get("bg_fg_band"), m.get("bg_sil_fg_band")
    start = (f"With the animal painted out, the background alone identifies {100 * bg:.0f}% as well as the coat "
             f"does; with the animal's outline left in, {100 * sil:.0f}%")
    if band == "HIGH":
        return start + ": the model leans on the background itself (place, vegetation), not on the animal."
    if sil_band == "HIGH" and band != "HIGH":
        return (start + ": the background itself is not the problem, the animal's outline is. The model may be "
                "matching body shape, pose or size rather than the coat pattern.")
    if sil_band == "MEDIUM" or band == "MEDIUM":
        return start + ": partly context. Check matches with Matched spots or the coat-only variant."
    return start + ": both low, so the model relies on the coat."


def diagnosis_summary_markdown(v: DiagnosisView) -> str:
    """The headline verdicts of a stored run, curator words first, ML terms on hover."""
    m = v.metrics
    band = m.get("bg_fg_band")
    tier = m.get("mirror_tier")
    ratio = m.get("cross_within_ratio")
    prov = html.escape(v.provenance(), quote=True)
    lines = [f"### {html.escape(v.model)} on {html.escape(v.benchmark)} "
             f"<span title=\"{prov}\">(run #{v.evaluation_id}, {v.created}, {m.get('n_images', '?')} test photos)</span>",
             f"- {tip('Background vs coat', 'context reliance BG/FG = macro mAP(background_inpainted) / macro mAP(foreground_only)')}: "
             f"<span title=\"{prov}\">{fmt(m.get('bg_fg'))}</span> — {html.escape(BAND_WORDS.get(band, 'not available'))}"
             + (f" ({tip(band, 'risk band: LOW < 0.95 <= MEDIUM <= 1.10 < HIGH')})" if band else ""),
             f"- {tip('Background + outline vs coat', 'BG+Sil/FG = macro mAP(background_only) / macro mAP(foreground_only)')}: "
             f"<span title=\"{prov}\">{fmt(m.get('bg_sil_fg'))}</span> ({m.get('bg_sil_fg_band') or '—'})"
             + (f"\n  {html.escape(context_sentence(m))}" if context_sentence(m) else ""),
             f"- {tip('Mirror check', 'laterality: mean mirror similarity s(x, flip(x)) on foreground cut-outs and its tier')}: "
             f"mean likeness to the mirror image <span title=\"{prov}\">{fmt(m.get('mirror_sim_mean'))}</span> "
             f"± {fmt(m.get('mirror_sim_std'))}: the model {html.escape(TIER_WORDS.get(tier, 'n/a'))} "
             f"({tip(tier or '—', 'mirror tier: aware < 0.85, moderate 0.85-0.96, strong shortcut 0.96-0.99, symmetric > 0.99')}).",
             f"- {tip('Photos whose mirror image looks more like another animal', 'count of danger_margin > 0')}: "
             f"{m.get('danger_margin_positive', '—')} of {m.get('n_images', '?')}; "
             f"{tip('mirrored-query ratio', 'mAP(mirrored queries) / mAP(regular queries)')}: "
             f"{fmt(m.get('mirrored_query_ratio'))}",
             f"- {tip('Other flank vs same flank', 'cross/within ratio = cross-flank macro mAP / within-flank macro mAP')}: "
             f"<span title=\"{prov}\">{fmt(ratio)}</span> (recognising an animal from its other side is the real target)"]
    return "\n".join(lines)


def context_figure(v: DiagnosisView) -> Any:
    """Bars: how well each image variant alone identifies the animals (macro mAP), with BG/FG and its risk band."""
    import plotly.graph_objects as go
    from core.variants import VARIANTS

    maps = v.metrics.get("map_macro_by_variant") or {}
    by_seed = v.metrics.get("map_macro_background_inpainted_by_seed") or {}
    names = [n for n in VARIANTS if n in maps]
    colours = {"foreground_only": "#2e8b57", "background_inpainted": "#c0392b", "background_only": "#e67e22"}
    hover = []
    for n in names:
        extra = ""
        if n == "background_inpainted" and by_seed:
            extra = "<br>per seed: " + ", ".join(f"seed {k}: {fmt(x)}" for k, x in by_seed.items())
        hover.append(f"{VARIANT_WORDS[n]} ({n})<br>average precision per animal (macro mAP) {fmt(maps[n])}{extra}"
                     f"<br>{html.escape(v.provenance(n)).replace('; ', '<br>')}")
    fig = go.Figure(go.Bar(x=[VARIANT_WORDS[n] for n in names], y=[maps[n] for n in names],
                           marker_color=[colours.get(n, "#8c7b6b") for n in names],
                           text=[fmt(maps[n]) for n in names], textposition="outside",
                           hovertext=hover, hoverinfo="text"))
    band = v.metrics.get("bg_fg_band") or "n/a"
    band_colour = {"LOW": "#2e8b57", "MEDIUM": "#daa520", "HIGH": "#c0392b"}.get(band, "#777")
    fig.add_annotation(xref="paper", yref="paper", x=1.0, y=1.14, showarrow=False, align="right",
                       text=f"<b>Background ÷ coat = {fmt(v.metrics.get('bg_fg'), 2)}</b> "
                            f"<span style='color:{band_colour}'>({band} risk)</span>",
                       hovertext="BG/FG = macro mAP(background_inpainted) / macro mAP(foreground_only); "
                                 "LOW < 0.95, MEDIUM 0.95-1.10, HIGH > 1.10")
    top = max([x for x in maps.values() if x is not None] or [1.0])
    fig.update_layout(title="How well each part of the photo identifies the animals", height=380,
                      margin=dict(l=50, r=20, t=80, b=40), showlegend=False,
                      yaxis=dict(title="average precision per animal", range=[0, min(1.05, top * 1.25 + 0.02)]))
    return fig


def mirror_histogram_figure(v: DiagnosisView) -> Any:
    """Histogram of per-photo mirror similarity with the tier bands shaded and named above the plot."""
    import plotly.graph_objects as go

    per = v.metrics.get("per_image") or {}
    sims = [x for x in per.get("mirror_sim", []) if x is not None]
    ids = [i for i, x in zip(per.get("image_ids", []), per.get("mirror_sim", [])) if x is not None]
    lo = min([0.7, *sims]) - 0.02 if sims else 0.7
    fig = go.Figure()
    for k, (name, a, b, colour) in enumerate(TIER_BANDS):
        shown_a = max(a, lo)
        if b <= shown_a:
            continue
        fig.add_vrect(x0=shown_a, x1=b, fillcolor=colour, line_width=0, layer="below")
        fig.add_annotation(x=(shown_a + b) / 2, xref="x", y=1.02 + 0.07 * (k % 2), yref="paper", yanchor="bottom",
                           text=name, showarrow=False, font=dict(size=11),
                           hovertext=f"mirror tier '{name}': mean mirror similarity from {a:g} to {b:g}")
    fig.add_trace(go.Histogram(x=sims, nbinsx=min(40, max(10, len(sims) // 3)), marker_color="#6b4f3a",
                               customdata=ids, name="photos",
                               hovertemplate="likeness to own mirror image %{x}<br>%{y} photos<br>"
                                             + html.escape(v.provenance("foreground_only vs mirror")).replace("; ", "<br>")
                                             + "<extra></extra>"))
    mean = v.metrics.get("mirror_sim_mean")
    if mean is not None:
        fig.add_vline(x=mean, line_dash="dash", line_color="#222", annotation_text=f"mean {mean:.3f}",
                      annotation_position="top left",
                      annotation_hovertext=f"mean mirror similarity {mean:.3f}: tier {v.metrics.get('mirror_tier')}")
    fig.update_layout(title="How alike each photo and its mirror image look to the model", height=400,
                      margin=dict(l=50, r=20, t=110, b=40), bargap=0.05, showlegend=False,
                      xaxis=dict(title="likeness to own mirror image (mirror similarity)", range=[lo, 1.0]),
                      yaxis=dict(title="photos"))
    return fig


def flank_rows(v: DiagnosisView, *, with_same_sighting: bool = False) -> list[list[Any]]:
    """Rows under FLANK_HEADERS: within-flank, cross-flank and their ratio (macro/micro mAP, CMC@1/5/10)."""
    m = v.metrics
    suffix = "_with_same_sighting" if with_same_sighting else ""
    rows: list[list[Any]] = []
    for key, words in (("within_flank", "Same flank (left→left, right→right)"),
                       ("cross_flank", "Other flank (left→right, right→left)")):
        r = m.get(key + suffix) or {}
        cmc = r.get("cmc_macro") or {}
        rows.append([words, fmt(r.get("map_macro")), fmt(r.get("map_micro")), fmt(cmc.get("1")), fmt(cmc.get("5")),
                     fmt(cmc.get("10")), r.get("n_queries", "—")])
    if not with_same_sighting:
        rows.append(["Other ÷ same flank (macro)", fmt(m.get("cross_within_ratio")), "", "", "", "", ""])
    return rows


FLANK_HELP = ("Average precision per animal = macro mAP (identity-balanced); per photo = micro mAP; "
              "'Right first' / 'in top 5' / 'in top 10' = CMC@1/5/10 (macro). Photos of the query's own sighting are "
              "left out of its gallery.")
