"""Flank suggestions for unlabelled photos from the active model's features (see :mod:`core.inspect.flank`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import select

from core.identify.features import extract_features
from core.inspect.flank import FlankClassifier, fit_flank_classifier, flank_class, orientation_features
from core.inspect.variants import flip_horizontal
from db.embeddings import embed_images, get_backbone, load_photo, sources_for
from db.inspect.masks import set_flanks
from db.models import Flank, Image
from db.session import Catalogue
from db.species import active_model_name, species_of_image

_CACHE: dict[tuple, FlankClassifier] = {}
#: The flank classifier is fitted on at most this many labelled photos (a seeded sample past it).
FLANK_FIT_MAX = 20_000


def _features(cat: Catalogue, image_ids: list[int], backbone: Any) -> np.ndarray:
    """[f(x) + f(flip x), f(x) - f(flip x)] for catalogue photos, both embeddings through the feature cache."""
    plain = embed_images(cat, image_ids, backbone=backbone)
    items = [(src.pixel_key, (lambda s=src: flip_horizontal(load_photo(cat, s)))) for src in sources_for(cat, image_ids)]
    flipped = extract_features(backbone, items, variant="full_rgb_flipped", cache_dir=cat.cache_dir / "features")
    return orientation_features(plain, flipped)


def flank_classifier(cat: Catalogue, *, model: str | None = None, species_id: int | None = None) -> FlankClassifier:
    """Fitted on every photo (of the species) whose flank was labelled by the manifest or a curator."""
    model = model or active_model_name(cat, species_id)
    with cat.unit_of_work() as s:
        q = select(Image.id, Image.flank).where(Image.flank != Flank.unknown,
                                                Image.flank_source.in_(["manifest", "curator"]))
        if species_id is not None:
            q = q.where(Image.species_id == species_id)
        rows = [(i, f.value) for i, f in s.execute(q.order_by(Image.id)).all() if flank_class(f.value)]
    if len(rows) > FLANK_FIT_MAX:  # a seeded sample: a large species' labelled photos never all sit in memory
        keep = np.random.default_rng(len(rows)).choice(len(rows), size=FLANK_FIT_MAX, replace=False)
        rows = [rows[k] for k in sorted(keep)]
    key = (str(cat.data_dir), model, species_id, tuple(r[0] for r in rows), tuple(r[1] for r in rows))
    if key not in _CACHE:
        feats = _features(cat, [r[0] for r in rows], get_backbone(cat, model)) if rows else np.zeros((0, 2))
        _CACHE[key] = fit_flank_classifier(feats, [r[1] for r in rows])
    return _CACHE[key]


def suggest_flanks(cat: Catalogue, image_ids: list[int], *, model: str | None = None) -> dict[int, dict[str, Any]]:
    """image id -> {flank, confidence, accuracy (held-out), model} for photos without a flank label."""
    out: dict[int, dict[str, Any]] = {}
    by_species: dict[int, list[int]] = {}
    for i in image_ids:
        by_species.setdefault(species_of_image(cat, i), []).append(i)
    for species_id, ids in by_species.items():
        name = model or active_model_name(cat, species_id)
        clf = flank_classifier(cat, model=name, species_id=species_id)
        flanks, conf = clf.predict(_features(cat, ids, get_backbone(cat, name)))
        for i, f, c in zip(ids, flanks, conf):
            out[i] = {"flank": f, "confidence": float(c), "accuracy": clf.accuracy, "n_train": clf.n_train,
                      "model": name}
    return out


def accept_flank_suggestion(cat: Catalogue, image_id: int, *, user: str) -> str:
    """Set the suggested flank on a photo (recorded as a curator's label). Returns the flank."""
    sug = suggest_flanks(cat, [int(image_id)])[int(image_id)]
    set_flanks(cat, [int(image_id)], sug["flank"], user=user, source="curator")  # undoable, as a curator's own
    return sug["flank"]
