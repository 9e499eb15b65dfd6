"""Selective-sensitivity runner (docs/DESIGN.md section 4, "Selective sensitivity"; the edits and statistics are
:mod:`core.inspect.sensitivity`): a model on a benchmark's masked test photos, stored in ``evaluations`` (kind
``sensitivity``, variant ``edits``) with what it needs to be traced: model, weights fingerprint, edit settings,
seed, benchmark and photo count.

Cost: every edited photo's embedding goes through the feature cache (``cache/features/<model>/sensitivity/``)
keyed by the photo and its mask, the dimension, the strength, the edit settings, the seed and the donor (the
other animal's photo and mask, or the other photo's background with the inpainter's config), so a second run of
the same model on the same benchmark embeds nothing again; painted-out backgrounds come from the inpainting cache
the BG/FG diagnostic shares (:func:`db.embeddings.inpainted_background`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sqlalchemy import select

from core.inspect.diagnostics import scores as model_scores
from core.identify.features import extract_features
from core.inspect.inpainting import (
    INPAINT_MODEL_ENV,
    InpainterNotConfiguredError,
    create_inpainter,
    default_inpainter_name,
)
from core.inspect.masking import default_masker_name
from core.inspect.sensitivity import (
    DIMENSIONS,
    EDIT_VERSION,
    IDENTITY_PROMPT,
    STRENGTHS,
    DiffusionIdentityEditor,
    EditSettings,
    background_donors,
    coat_canvas,
    draw_directions,
    edit_photo,
    nearest_other_individual,
    photo_seed,
)
from core.inspect.sensitivity_stats import similarity_to_original, summarise_sensitivity
from db.identify.benchmarks import load_benchmark, load_benchmark_fit_ids
from db.catalogue import CatalogueError
from db.embeddings import (
    ImageSource,
    embed_images,
    get_backbone,
    inpainted_background,
    load_mask,
    load_photo,
    masked_content_key,
    sources_for,
)
from db.identify.evaluation import store_evaluation
from db.inspect.masks import empty_automatic_masks, mask_images, retry_empty_masks
from db.models import Image, Species
from db.session import Catalogue

__all__ = ["IDENTITY_EDITS", "SENSITIVITY_KIND", "SENSITIVITY_VARIANT", "MissingMasksError", "identity_edit_in_use",
           "retry_empty_masks",
           "photos_without_mask", "run_sensitivity", "unusable_masks"]

SENSITIVITY_KIND = "sensitivity"
SENSITIVITY_VARIANT = "edits"
IDENTITY_EDITS = ("coat", "diffusion")
SHOWN_MISSING = 5


class MissingMasksError(CatalogueError):
    """Test photos without a usable mask (none, or an empty one): the edits need one, and none is skipped.
    ``missing`` and ``empty`` hold (id, name) pairs; ``automatic`` the ids of the empty masks a batch run made
    (:func:`db.inspect.masks.made_automatically`), which ``--mask-missing`` makes again. With ``masked_first`` (the run
    already masked what it could, ``--mask-missing``) the message says what to do by hand instead of naming that
    option again."""

    def __init__(self, benchmark: str, missing: Sequence[tuple[int, str]], total: int, *,
                 empty: Sequence[tuple[int, str]] = (), errors: Sequence[dict[str, Any]] = (),
                 automatic: Sequence[int] = (), masked_first: bool = False) -> None:
        self.benchmark, self.missing, self.empty, self.total = benchmark, list(missing), list(empty), total
        self.automatic, self.masked_first = [int(i) for i in automatic], masked_first

        def named(photos: list[tuple[int, str]]) -> str:
            shown = ", ".join(f"{name} (photo #{i})" for i, name in photos[:SHOWN_MISSING])
            return shown + (f" and {len(photos) - SHOWN_MISSING} more" if len(photos) > SHOWN_MISSING else "")

        def numbers(photos: list[tuple[int, str]]) -> str:
            shown = ", ".join(f"#{i}" for i, _ in photos[:SHOWN_MISSING])
            return shown + (f" and {len(photos) - SHOWN_MISSING} more" if len(photos) > SHOWN_MISSING else "")

        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} of the {total} test photos of benchmark {benchmark!r} have no mask: "
                         f"{named(self.missing)}.")
        if self.empty:
            parts.append(f"{len(self.empty)} of the {total} test photos of benchmark {benchmark!r} have an empty mask "
                         f"(the masker found no animal): {named(self.empty)}.")
        why = f" The masker failed on some: {errors[0].get('error')}" if errors else ""
        need = (" The selective-sensitivity diagnostic changes the background outside the animal's mask and the coat "
                "inside it, so it needs every test photo masked and skips none.")
        curators = [p for p in self.empty if p[0] not in set(self.automatic)]
        by_hand = self.missing + self.empty if masked_first else curators
        advice = []
        if not masked_first and (self.missing or len(by_hand) < len(self.empty)):
            first = ("Mask them first with `rosette mask` (every photo without a mask; `--masker grabcut` or `sam2`) "
                     "or one by one in the Mask tab; or let" if self.missing else "Let")
            advice.append(f"{first} this run mask them (an empty mask a batch run made is made again): `rosette "
                          "diagnose --sensitivity --mask-missing`, or tick \"Mask the photos without a mask first\" "
                          "in the Diagnostics tab.")
        if masked_first and (self.missing or len(by_hand) > len(curators)):
            advice.append("This run already masked what a batch run may mask (photos without a mask, empty masks a "
                          "batch run made), and tried again with a click in the middle where the masker found no "
                          "animal.")
        if by_hand:
            kept = (" A curator's own mask is never replaced by a batch run." if curators else "")
            advice.append(f"Open photo{'s' if len(by_hand) != 1 else ''} {numbers(by_hand)} in the Mask tab, click on "
                          "the animal or draw a box around it, press \"Make mask\" and accept the mask; then run "
                          f"this again.{kept}")
        super().__init__(" ".join(parts) + why + need + (" " + " ".join(advice) if advice else ""))


def unusable_masks(cat: Catalogue, image_ids: Sequence[int]) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(photos with no mask, photos whose mask is empty), each as (id, original name) in the given order."""
    with cat.unit_of_work() as s:
        rows = {r.id: r for r in s.execute(select(Image.id, Image.original_name, Image.mask_path, Image.mask_flags)
                                           .where(Image.id.in_(list(image_ids)))).all()}
    missing = [(int(i), rows[i].original_name) for i in image_ids if i in rows and not rows[i].mask_path]
    empty = [(int(i), rows[i].original_name) for i in image_ids
             if i in rows and rows[i].mask_path and "empty" in (rows[i].mask_flags or [])]
    return missing, empty


def photos_without_mask(cat: Catalogue, image_ids: Sequence[int]) -> list[tuple[int, str]]:
    """(id, original name) of the photos of ``image_ids`` with no catalogue mask, in the given order."""
    return unusable_masks(cat, image_ids)[0]


def identity_edit_in_use(requested: str | None = None) -> str:
    """``requested`` when given, else ``diffusion`` where a diffusers inpainting model is configured
    (:func:`core.inspect.inpainting.default_inpainter_name`), else ``coat`` (the coat transfer)."""
    configured = default_inpainter_name() == "diffusers"
    if requested:
        if requested not in IDENTITY_EDITS:
            raise ValueError(f"unknown identity edit {requested!r}; expected one of {', '.join(IDENTITY_EDITS)}")
        if requested == "diffusion" and not configured:
            raise ValueError(f"the diffusion identity edit repaints the animal with a diffusers inpainting model, and "
                             f"none is configured: set {INPAINT_MODEL_ENV} to a local diffusers folder (or a Hub id "
                             "already in the Hugging Face cache), or use the coat transfer (identity edit 'coat')")
        return requested
    return "diffusion" if configured else "coat"


def _fingerprint(d: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


class _Pictures:
    """The photos, masks, painted-out backgrounds and coats the loaders need, a few at a time (the edits of one
    photo are loaded one after another, so a small memory suffices)."""

    def __init__(self, cat: Catalogue, sources: Sequence[ImageSource], inpainter: Any, size: int = 8) -> None:
        self.cat, self.sources, self.inpainter, self.size = cat, sources, inpainter, size
        self._memo: OrderedDict[tuple[str, int], Any] = OrderedDict()
        self._lock = threading.Lock()

    def _get(self, key: tuple[str, int], make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                return self._memo[key]
        value = make()
        with self._lock:
            self._memo[key] = value
            while len(self._memo) > self.size:
                self._memo.popitem(last=False)
        return value

    def photo(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        def make() -> tuple[np.ndarray, np.ndarray]:
            rgb = load_photo(self.cat, self.sources[i])
            mask = load_mask(self.cat, self.sources[i], shape=rgb.shape[:2])
            if mask is None or not mask.any():
                raise CatalogueError(f"the mask of photo #{self.sources[i].image_id} is empty: make it again in the "
                                     "Mask tab, with a click on the animal")
            return rgb, mask

        return self._get(("photo", i), make)

    def background(self, j: int) -> np.ndarray:
        def make() -> np.ndarray:
            rgb, mask = self.photo(j)
            return inpainted_background(self.cat, self.sources[j], rgb, mask, inpainter=self.inpainter, seed=0)

        return self._get(("background", j), make)

    def coat(self, i: int, j: int) -> np.ndarray:
        def make() -> np.ndarray:
            rgb, mask = self.photo(i)
            return coat_canvas(rgb.shape[:2], mask, *self.photo(j))

        return self._get(("coat", i * len(self.sources) + j), make)


def _species_of(cat: Catalogue, image_ids: Sequence[int]) -> tuple[list[int], dict[int, str]]:
    with cat.unit_of_work() as s:
        found = dict(s.execute(select(Image.id, Image.species_id).where(Image.id.in_(list(image_ids)))).all())
        names = dict(s.execute(select(Species.id, Species.name)).all())
    return [int(found[i]) for i in image_ids], {int(k): v for k, v in names.items()}


def run_sensitivity(cat: Catalogue, *, backbone: str, benchmark: str, seed: int = 0, inpainter: str | None = None,
                    identity_edit: str | None = None, mask_missing: bool = False, masker: str | None = None,
                    settings: EditSettings | None = None, n_resamples: int = 2000, user: str = "curator",
                    progress: Callable[[float, str], None] | None = None,
                    should_cancel: Callable[[], bool] | None = None, store: bool = True) -> dict[str, Any]:
    """Edit every test photo of ``benchmark`` along the four dimensions at the five strengths, read ``backbone``'s
    similarity of each edit to the original, and summarise (:func:`core.inspect.sensitivity.summarise_sensitivity`).

    Test photos without a catalogue mask, or with an empty one, raise :class:`MissingMasksError` naming them; with
    ``mask_missing``, ``masker`` (default: SAM 2 if configured, else GrabCut) first masks those without one, and
    makes again the empty masks a batch run made (never a curator's), into the catalogue as ``rosette mask`` does
    (a mask that still comes out empty is refused the same way). The background edit blends in the painted-out
    background (by ``inpainter``, default as the BG/FG diagnostic) of another test photo, drawn per photo among
    other individuals and sightings; the identity edit takes the coat of the nearest other individual of the same
    species by the model's own ranking of the whole photos, or repaints the animal with a diffusion model
    (``identity_edit``, see :func:`identity_edit_in_use`)."""

    def report(frac: float, msg: str) -> None:
        if progress:
            progress(frac, msg)

    started = time.perf_counter()
    settings = settings or EditSettings()
    method = identity_edit_in_use(identity_edit)
    data = load_benchmark(cat, benchmark, split="test")
    if len(data) < 2:
        raise CatalogueError(f"benchmark {benchmark!r} has {len(data)} test photo(s); the sensitivity diagnostic "
                             "needs at least two")
    missing, empty = unusable_masks(cat, data.image_ids)
    automatic = empty_automatic_masks(cat, [i for i, _ in empty])
    mask_run: dict[str, Any] | None = None
    if (missing or automatic) and mask_missing:
        masker_name = masker or default_masker_name()
        redo = set(automatic)
        report(0.0, f"masking {len(missing)} test photos without a mask and {len(redo)} with an empty automatic "
                    f"mask ({masker_name})")
        todo = [i for i, _ in missing] + [i for i in data.image_ids if i in redo]
        mask_run = mask_images(cat, masker=masker_name, image_ids=todo, only_missing=False,
                               user=user, should_cancel=should_cancel,
                               progress=lambda d, t: report(0.15 * d / max(t, 1), f"masking {d}/{t}"))
        made_now = set(todo)
        missing, empty = unusable_masks(cat, data.image_ids)
        retried = retry_empty_masks(cat, [i for i, _ in empty if i in made_now], masker=masker_name, user=user)
        if retried:
            mask_run = {**mask_run, "made_again_with_a_click": retried}
            missing, empty = unusable_masks(cat, data.image_ids)
        automatic = empty_automatic_masks(cat, [i for i, _ in empty])
    if missing or empty:
        raise MissingMasksError(data.name, missing, len(data), empty=empty,
                                errors=(mask_run or {}).get("errors") or (), automatic=automatic,
                                masked_first=mask_missing)

    model = get_backbone(cat, backbone, fit_image_ids=load_benchmark_fit_ids(cat, benchmark))
    metric = model.config.metric
    sources = sources_for(cat, data.image_ids)
    report(0.15, "embedding the original photos")
    originals = embed_images(cat, data.image_ids, backbone=model, variant="full_rgb", sources=sources,
                             should_cancel=should_cancel)
    species, species_names = _species_of(cat, data.image_ids)
    nearest = nearest_other_individual(model_scores(originals, originals, metric=metric), data.labels, species)
    alone = [data.image_ids[i] for i in np.flatnonzero(nearest < 0)]
    if alone:
        raise CatalogueError(f"the identity edit needs, for every test photo, a test photo of another individual of "
                             f"the same species; photo(s) #{', #'.join(map(str, alone[:SHOWN_MISSING]))} have none "
                             f"in benchmark {benchmark!r}")
    keys = [src.pixel_key for src in sources]
    bg_donor = background_donors(keys, data.labels, data.sightings if any(data.sightings) else None, seed=seed)

    editor: DiffusionIdentityEditor | None = None
    try:  # a diffusers model that cannot be loaded is the curator's to fix: say so, with no traceback
        inp = create_inpainter(inpainter or default_inpainter_name())
        if method == "diffusion":
            kind = species_names.get(species[0])
            prompt = IDENTITY_PROMPT.replace("the same kind of animal", f"a {kind}") if kind else IDENTITY_PROMPT
            editor = DiffusionIdentityEditor(create_inpainter("diffusers"), prompt=prompt)
    except InpainterNotConfiguredError as exc:
        raise CatalogueError(str(exc)) from exc
    identity_config = editor.config if editor is not None else {
        "identity_edit": "coat", "donor": "nearest other individual of the same species by the model's ranking of "
        "the whole photos", "warp": "donor mask's bounding box resized onto the animal's, nearest coat pixel where "
        "the donor's mask is off", "blend": "inside the animal's mask, (1 - t) photo + t coat"}
    settings_fp, inp_fp, editor_fp = settings.fingerprint(), _fingerprint(inp.config), _fingerprint(identity_config)
    pictures = _Pictures(cat, sources, inp)

    def loader(i: int, dim: str, t: float) -> Callable[[], np.ndarray]:
        def load() -> np.ndarray:
            rgb, mask = pictures.photo(i)
            pseed = photo_seed(seed, keys[i])
            if dim == "background":
                return edit_photo(rgb, mask, dim, t, background=pictures.background(int(bg_donor[i])))
            if dim == "identity":
                if editor is not None:
                    return edit_photo(rgb, mask, dim, t, identity_editor=editor, seed=pseed)
                return edit_photo(rgb, mask, dim, t, coat=pictures.coat(i, int(nearest[i])))
            return edit_photo(rgb, mask, dim, t, directions=draw_directions(pseed), settings=settings)

        return load

    items: list[tuple[str, Callable[[], np.ndarray]]] = []
    rows: list[tuple[int, str, int]] = []  # (photo, dimension, strength index) of each item
    for i, src in enumerate(sources):
        for dim in DIMENSIONS:
            if dim == "background":
                j = int(bg_donor[i])
                extra = f"bg {masked_content_key(sources[j])} inpainter {inp_fp} seed 0"
            elif dim == "identity":
                extra = (f"diffusion {editor_fp} seed {photo_seed(seed, keys[i])}" if editor is not None
                         else f"coat {editor_fp} of {masked_content_key(sources[int(nearest[i])])}")
            else:
                extra = f"seed {seed}"
            for k, t in enumerate(STRENGTHS):
                if t == 0.0:
                    continue  # the photo itself (every edit is the identity at strength 0): similarity 1
                key = hashlib.sha256(f"{masked_content_key(src)}|{dim}|{t}|{settings_fp}|{extra}".encode()).hexdigest()
                items.append((key[:40], loader(i, dim, t)))
                rows.append((i, dim, k))

    stats: dict[str, int] = {}
    report(0.2, f"embedding {len(items)} edited photos")
    edited = extract_features(model, items, variant="sensitivity", cache_dir=cat.cache_dir / "features",
                              should_cancel=should_cancel, stats=stats,
                              progress=lambda d, t: report(0.2 + 0.75 * d / max(t, 1), f"edited photos {d}/{t}"))
    n = len(data)
    sims = {d: np.ones((n, len(STRENGTHS)), dtype=np.float64) for d in DIMENSIONS}
    index = np.array([i for i, _, _ in rows])
    values = similarity_to_original(originals[index], edited, metric=metric)
    for (i, dim, k), v in zip(rows, values):
        sims[dim][i, k] = v
    report(0.96, "slopes and intervals")
    summary = summarise_sensitivity(sims, STRENGTHS, seed=seed, n_resamples=n_resamples)

    mask_sources = Counter(src.mask_source or "?" for src in sources)
    result: dict[str, Any] = {
        "model": model.config.name, "benchmark": data.name, "variant": SENSITIVITY_VARIANT, "n_images": n,
        "metric": metric, **summary.to_dict(),
        "edits": {"seed": seed, "strengths": list(STRENGTHS), "settings": settings.to_dict(),
                  "settings_fingerprint": settings_fp, "edit_version": EDIT_VERSION,
                  "background": "painted-out background of another test photo (another individual and sighting "
                                "where there is one), blended outside the animal's mask",
                  "lighting": "gamma, exposure and colour temperature", "identity": method,
                  "identity_config": identity_config,
                  "viewpoint": "camera turn and in-plane rotation up to the max angle, zoom and crop shift"},
        "inpainter": inp.name, "inpainter_config": inp.config,
        "masks": {"sources": dict(mask_sources), "made_now": (mask_run or {}).get("summary")},
        "model_fingerprint": model.config.fingerprint(), "weights_sha256": model.config.weights_sha256,
        "cache": {"edited_photos": len(items), "computed": stats.get("computed", 0), "cached": stats.get("cached", 0)},
        "per_image": {"image_ids": list(data.image_ids), "labels": list(data.labels),
                      "identity_donor_ids": [data.image_ids[int(j)] for j in nearest],
                      "background_donor_ids": [data.image_ids[int(j)] for j in bg_donor],
                      "similarities": {d: sims[d].tolist() for d in DIMENSIONS}},
        "seconds": round(time.perf_counter() - started, 2),
        "model_config": model.config.to_dict(),
    }
    if store:
        result["evaluation_id"] = store_evaluation(
            cat, result, kind=SENSITIVITY_KIND, masker=", ".join(sorted(mask_sources)),
            inpainter=f"{inp.name}; identity edit {method}")
    report(1.0, "done")
    return result
