"""What the Mask and Diagnostics tabs call: a few lines each over ``db`` and ``core``.

Mask tab: a :class:`MaskDraft` holds one photo's prompts (clicks, box) and the
mask proposed for it until the curator accepts it (:func:`accept_mask`) or
starts again (:func:`clear_prompts`). Nothing is stored before "Accept".

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

from app.services import curator_name
from db.catalogue import CatalogueError
from db.models import Image, Individual
from db.session import Catalogue

DEFAULT_BACKBONE = "efficientnet_lite0"
FLANK_CHOICES = ["left", "right", "front", "other", "unknown"]
CLICK_MODES = ("animal", "background", "box corner")

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


# =========================================================================== Mask tab


@dataclass
class MaskDraft:
    """One photo being masked: its prompts and the proposed (not yet stored) mask."""

    image_id: int | None = None
    points: list[tuple[float, float]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)  # 1 animal, 0 background
    corners: list[tuple[float, float]] = field(default_factory=list)  # box corners clicked so far (0-2)
    box: tuple[float, float, float, float] | None = None
    mask: np.ndarray | None = field(default=None, repr=False)
    source: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    stored: bool = False  # the mask shown is the one already in the catalogue
    flank: str = "unknown"


def mask_image_choices(cat: Catalogue) -> list[tuple[str, int]]:
    """(label, image id) for every catalogue photo: id, file name, individual, who made its mask."""
    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.id, Image.original_name, Individual.name, Image.mask_source)
                         .outerjoin(Individual, Image.individual_id == Individual.id).order_by(Image.id)).all()
    return [(f"#{i} · {name} · {ind or 'no individual yet'} · {'mask: ' + src if src else 'no mask yet'}", i)
            for i, name, ind, src in rows]


def open_for_masking(cat: Catalogue, image_id: int) -> MaskDraft:
    """A draft for one photo, showing its stored mask (if any) and flank."""
    from db.embeddings import load_mask, sources_for

    with cat.unit_of_work() as s:
        img = s.get(Image, int(image_id))
        if img is None:
            raise CatalogueError(f"There is no photo #{image_id}.")
        draft = MaskDraft(image_id=img.id, source=img.mask_source, details=dict(img.mask_details or {}),
                          flank=img.flank.value, stored=img.mask_path is not None)
        shape = (img.height, img.width)
    if draft.stored:
        draft.mask = load_mask(cat, sources_for(cat, [draft.image_id])[0], shape=shape)
    return draft


def photo(cat: Catalogue, image_id: int) -> np.ndarray:
    """The photo as HxWx3 uint8 RGB."""
    from db.embeddings import load_photo, sources_for

    return load_photo(cat, sources_for(cat, [int(image_id)])[0])


def add_click(draft: MaskDraft, x: float, y: float, *, mode: str) -> MaskDraft:
    """Record a click at pixel (x, y): an animal point, a background point, or a box corner.

    Two box corners make the box; a third corner starts a new box. The proposed
    mask is dropped because the prompts changed.
    """
    if draft.image_id is None:
        raise ValueError("Pick a photo first.")
    if mode not in CLICK_MODES:
        raise ValueError(f"unknown click mode {mode!r}")
    if mode == "box corner":
        corners = [(float(x), float(y))] if len(draft.corners) >= 2 else [*draft.corners, (float(x), float(y))]
        box = None
        if len(corners) == 2:
            (x0, y0), (x1, y1) = corners
            box = (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))
        draft.corners, draft.box = corners, box
    else:
        draft.points = [*draft.points, (float(x), float(y))]
        draft.labels = [*draft.labels, 1 if mode == "animal" else 0]
    draft.mask, draft.source, draft.details, draft.stored = None, None, {}, False
    return draft


def set_box(draft: MaskDraft, x0: float | None, y0: float | None, x1: float | None, y1: float | None) -> MaskDraft:
    """Set the box from typed numbers (any corner order); all four are needed."""
    if draft.image_id is None:
        raise ValueError("Pick a photo first.")
    if any(v is None for v in (x0, y0, x1, y1)):
        raise ValueError("Give all four box numbers (left, top, right, bottom), in pixels.")
    draft.box = (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))
    draft.corners = [(draft.box[0], draft.box[1]), (draft.box[2], draft.box[3])]
    draft.mask, draft.source, draft.details, draft.stored = None, None, {}, False
    return draft


def clear_prompts(draft: MaskDraft) -> MaskDraft:
    """Redo: forget clicks, box and the proposed mask (the stored mask, if any, is untouched)."""
    return MaskDraft(image_id=draft.image_id, flank=draft.flank)


def run_masker(cat: Catalogue, draft: MaskDraft, *, masker: str | None = None) -> MaskDraft:
    """Propose a mask from the draft's prompts (default: SAM 2 if configured, else GrabCut); nothing stored."""
    from db.masks import predict_mask

    if draft.image_id is None:
        raise ValueError("Pick a photo first.")
    name = masker or masker_in_use()[0]
    res = predict_mask(cat, draft.image_id, masker=name, points=draft.points or None,
                       point_labels=draft.labels or None, box=draft.box)
    draft.mask, draft.source, draft.stored = res.mask, res.source, False
    draft.details = dict(res.details)
    return draft


def accept_mask(cat: Catalogue, draft: MaskDraft, *, user: str) -> str:
    """Store the proposed mask for the photo (replacing any earlier one); returns what happened."""
    from db.masks import store_mask

    user = curator_name(user)
    if draft.image_id is None:
        raise ValueError("Pick a photo first.")
    if draft.mask is None or draft.stored:
        raise ValueError("There is no new mask to accept: click on the animal and press “Make mask” first.")
    q = store_mask(cat, draft.image_id, draft.mask, source=draft.source or "unknown", details=draft.details, user=user)
    draft.stored = True
    problems = f" Check it: {' '.join(FLAG_WORDS[f][0] for f in q['flags'] if f in FLAG_WORDS)}" if q["flags"] else ""
    return (f"Saved the mask of photo #{draft.image_id} (made by {describe_mask_source(q['source'], draft.details)}, "
            f"solidity {q['solidity']:.2f}).{problems}")


def save_flank(cat: Catalogue, image_id: int | None, flank: str, *, user: str) -> str:
    """Record which side of the animal the photo shows."""
    from db.masks import set_flank

    user = curator_name(user)
    if image_id is None:
        raise ValueError("Pick a photo first.")
    set_flank(cat, int(image_id), flank, user=user)
    return f"Photo #{image_id}: flank set to {flank}."


def mask_report(draft: MaskDraft) -> str:
    """Markdown: who made the mask, its solidity in words, and its warnings (ML terms in tooltips)."""
    from core.masking import mask_quality

    if draft.image_id is None:
        return "Pick a photo to mask."
    if draft.mask is None:
        n_pos = sum(draft.labels)
        n_neg = len(draft.labels) - n_pos
        box = "a box" if draft.box else ("one box corner" if draft.corners else "no box")
        return (f"**No mask proposed yet.** Prompts: {n_pos} click(s) on the animal, {n_neg} on the background, "
                f"{box}. Press “Make mask” (with no prompt, the masker uses the whole frame minus a small margin).")
    q = mask_quality(draft.mask)
    who = describe_mask_source(draft.source, draft.details)
    status = "Stored mask" if draft.stored else "Proposed mask (not saved yet: press Accept to keep it)"
    if q.solidity >= 0.85:
        shape_words = "compact, clean outline"
    elif q.solidity >= 0.6:
        shape_words = "usual for a standing animal: legs, horns and tail make dents in the outline"
    else:
        shape_words = "very ragged or partial outline: check it"
    lines = [f"**{status}.** Mask made by {who}.",
             f"- {tip('Outline quality', 'solidity = mask area / convex-hull area, in (0, 1]; 1 = no dents')}: "
             f"**{q.solidity:.2f}** ({shape_words}). Low values make training trust this photo less.",
             f"- {tip('Share of the photo covered', 'mask area fraction')}: {q.area_fraction:.0%}; "
             f"{tip('pieces', 'significant 8-connected components')}: {q.n_components}"]
    for flag in q.flags:
        words, term = FLAG_WORDS.get(flag, (flag, flag))
        lines.append(f"- ⚠ {tip(words, term)}")
    if not q.flags:
        lines.append("- No warnings.")
    return "\n".join(lines)


def render_overlay(rgb: np.ndarray, mask: np.ndarray | None = None, *,
                   points: Sequence[tuple[float, float]] = (), labels: Sequence[int] = (),
                   corners: Sequence[tuple[float, float]] = (),
                   box: tuple[float, float, float, float] | None = None, alpha: float = 0.4) -> np.ndarray:
    """The photo with the mask tinted amber and outlined, animal clicks green, background clicks red, box yellow.

    tinted = (1 - alpha) * photo + alpha * amber inside the mask; the outline is the mask's external contours.
    """
    import cv2

    out = np.array(rgb, dtype=np.uint8, copy=True)
    h, w = out.shape[:2]
    thick = max(2, round(max(h, w) / 256))
    if mask is not None and mask.any():
        m = mask.astype(bool)
        tint = np.array([255, 176, 0], dtype=np.float32)
        out[m] = ((1 - alpha) * out[m].astype(np.float32) + alpha * tint).astype(np.uint8)
        contours, _ = cv2.findContours(m.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        cv2.drawContours(out, contours, -1, (255, 255, 255), thick + 2)
        cv2.drawContours(out, contours, -1, (230, 97, 0), thick)
    if box is not None:
        x0, y0, x1, y1 = (int(round(v)) for v in box)
        cv2.rectangle(out, (x0, y0), (x1, y1), (255, 230, 0), thick)
    for cx, cy in corners:
        c = (int(round(cx)), int(round(cy)))
        cv2.drawMarker(out, c, (255, 230, 0), cv2.MARKER_CROSS, 6 * thick, thick)
    radius = 4 * thick
    for (px, py), lab in zip(points, labels):
        c = (int(round(px)), int(round(py)))
        cv2.circle(out, c, radius + thick, (255, 255, 255), -1)
        cv2.circle(out, c, radius, (40, 170, 60) if lab else (210, 40, 40), -1)
    return out


def draft_picture(cat: Catalogue, draft: MaskDraft) -> np.ndarray | None:
    """What the Mask tab shows: the photo with the draft's mask and prompts drawn on it."""
    if draft.image_id is None:
        return None
    return render_overlay(photo(cat, draft.image_id), draft.mask, points=draft.points, labels=draft.labels,
                          corners=draft.corners if len(draft.corners) == 1 else (), box=draft.box)


def submit_mask_all(cat: Catalogue, *, user: str, masker: str | None = None) -> tuple[int | None, str]:
    """Queue a ``mask`` job for every photo without a mask; returns (job id or None, message)."""
    from jobs.queue import submit

    user = curator_name(user)
    with cat.unit_of_work() as s:
        missing = len(s.scalars(select(Image.id).where(Image.mask_path.is_(None))).all())
    if not missing:
        return None, "Every photo already has a mask; nothing to do."
    name, words = (masker, describe_mask_source(masker)) if masker else masker_in_use()
    job_id = submit(cat, "mask", {"masker": name, "only_missing": True, "user": user})
    return job_id, (f"Queued job #{job_id}: mask {missing} photo{'s' if missing != 1 else ''} without a mask "
                    f"with {words}. Follow it in the Jobs tab.")


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


def _photo_facts(cat: Catalogue, image_id: int) -> dict[str, Any]:
    with cat.unit_of_work() as s:
        img = s.get(Image, int(image_id))
        if img is None:
            raise CatalogueError(f"There is no photo #{image_id}.")
        ind = s.get(Individual, img.individual_id) if img.individual_id else None
        return {"name": img.original_name, "individual_id": img.individual_id, "individual": ind.name if ind else None,
                "sighting_id": img.sighting_id, "mask_path": img.mask_path, "mask_source": img.mask_source,
                "mask_details": dict(img.mask_details or {})}


def diagnose_image(cat: Catalogue, image_id: int, *, backbone: str | Any = DEFAULT_BACKBONE,
                   inpainter: str | None = None, seed: int = 0,
                   progress: Callable[[float, str], None] | None = None) -> ImageDiagnosis:
    """Variants, own-individual scores and the mirror check of one masked photo x.

    With s the model's score (cosine, or exp(-d) for Lorentz heads) and e_v(x) the
    embedding of variant v of x:

    - own_score(v) = max over the other photos y of x's individual of s(e_v(x), e_full_rgb(y)):
      how strongly that variant alone still points to the right animal, with whole
      photos as the gallery. Photos from x's own sighting are left out when the
      individual has photos from other sightings (same place and moment would inflate it).
      None when x has no individual or it has no other photo.
    - mirror_sim = s(e_foreground_only(x), e_mirror(x)).
    - nn_sim = max over photos y of *other* (active) individuals of s(e_mirror(x), g(y)),
      g(y) = e_foreground_only(y) when y has a mask, else e_full_rgb(y) (counted in
      ``other_cutouts`` so the panel can say how fair the comparison was).
    - danger_margin = nn_sim - mirror_sim (> 0: the mirrored photo looks more like another animal).
    """
    from core.diagnostics import laterality, scores
    from core.variants import VARIANTS
    from db.embeddings import embed_images, sources_for, variant_loader

    def report(frac: float, msg: str) -> None:
        if progress:
            progress(frac, msg)

    facts = _photo_facts(cat, image_id)
    if not facts["mask_path"]:
        raise ValueError(f"Photo #{image_id} has no mask yet: make one in the Mask tab first.")
    model = _backbone(cat, backbone)
    metric = getattr(model, "metric", None) or getattr(getattr(model, "config", None), "metric", "cosine")
    inp = _create_inpainter(inpainter)
    src = sources_for(cat, [int(image_id)])[0]

    emb: dict[str, np.ndarray] = {}
    pictures: dict[str, np.ndarray] = {}
    for i, v in enumerate(VARIANTS):
        report(0.6 * i / len(VARIANTS), f"{VARIANT_WORDS[v]} ({v})")
        pictures[v] = variant_loader(cat, src, v, inpainter=inp, seed=seed)[1]()
        emb[v] = embed_images(cat, [src.image_id], backbone=model, variant=v, inpainter=inp, seed=seed)[0]

    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.id, Image.individual_id, Image.sighting_id, Image.mask_path, Individual.name,
                                Image.thumb_path, Image.blob_path)
                         .join(Individual, Image.individual_id == Individual.id)
                         .where(Individual.active.is_(True), Image.id != src.image_id).order_by(Image.id)).all()

    # own individual: every variant against whole photos of the same animal
    own = [r for r in rows if facts["individual_id"] is not None and r.individual_id == facts["individual_id"]]
    other_sightings = [r for r in own if facts["sighting_id"] is None or r.sighting_id != facts["sighting_id"]]
    same_included = bool(own) and not other_sightings
    own = other_sightings or own
    own_scores: dict[str, float | None] = dict.fromkeys(VARIANTS)
    if own:
        report(0.65, f"comparing with {len(own)} photo(s) of the same individual")
        g = embed_images(cat, [r.id for r in own], backbone=model, variant="full_rgb")
        sim = scores(np.stack([emb[v] for v in VARIANTS]), g, metric=metric)
        own_scores = {v: float(sim[k].max()) for k, v in enumerate(VARIANTS)}

    # other individuals: the mirrored cut-out against their cut-outs (full photos where no mask exists)
    others = [r for r in rows if r.individual_id != facts["individual_id"]]
    cut = [r for r in others if r.mask_path]
    whole = [r for r in others if not r.mask_path]
    nn_sim = margin = None
    nn_row = None
    query_label = f"individual {facts['individual_id']}" if facts["individual_id"] else "the photo itself"
    if others:
        report(0.75, f"comparing the mirrored photo with {len(others)} photo(s) of other individuals")
        parts = []
        if cut:
            parts.append(embed_images(cat, [r.id for r in cut], backbone=model, variant="foreground_only"))
        if whole:
            parts.append(embed_images(cat, [r.id for r in whole], backbone=model, variant="full_rgb"))
        ordered = cut + whole
        lat = laterality(emb["foreground_only"][None], emb["mirror"][None], [query_label], metric=metric,
                         gallery=np.concatenate(parts), gallery_labels=[f"individual {r.individual_id}" for r in ordered])
        mirror_sim = float(lat.mirror_sim[0])
        nn_sim, margin = float(lat.nn_sim[0]), float(lat.danger_margin[0])
        nn_row = ordered[int(lat.nn_index[0])]
    else:
        mirror_sim = float(scores(emb["foreground_only"][None], emb["mirror"][None], metric=metric)[0, 0])
    report(1.0, "done")
    cfg = _config_dict(model)
    return ImageDiagnosis(
        image_id=src.image_id, name=facts["name"], individual=facts["individual"],
        variants=[VariantView(v, pictures[v], own_scores[v]) for v in VARIANTS],
        mirror_sim=mirror_sim, nn_sim=nn_sim, danger_margin=margin,
        nn_image_id=nn_row.id if nn_row else None, nn_individual=nn_row.name if nn_row else None,
        nn_thumb=(cat.blobs.existing(nn_row.thumb_path) or cat.blobs.existing(nn_row.blob_path)) if nn_row else None,
        own_gallery=len(own), own_same_sighting_included=same_included, other_gallery=len(others),
        other_cutouts=len(cut),
        provenance={"model": cfg.get("name", str(backbone)), "weights": weights_label(cfg), "metric": metric,
                    "masker": describe_mask_source(facts["mask_source"], facts["mask_details"]),
                    "mask_source": facts["mask_source"], "inpainter": f"{inp.name}: {describe_inpainter(inp.name)}",
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
             f"<span title=\"{prov}\">{fmt(m.get('bg_sil_fg'))}</span> ({m.get('bg_sil_fg_band') or '—'})",
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
