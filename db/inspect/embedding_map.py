"""The embedding map of a species' photos for one model: computed by a background job (UMAP, cached on disk
per model fingerprint and photo set), read back with each photo's colouring facts and thumbnail."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select

from core.identify.features import atomic_write
from core.inspect.projection import project_2d
from db.embeddings import all_image_ids, embed_images, get_backbone
from db.models import Image, Individual, MatchDecision, Species
from db.session import Catalogue

COLOUR_BY = ("individual", "flank", "solidity", "species", "undecided")


#: A map shows at most this many photos: past it a seeded sample (UMAP of a million points would take hours on a
#: CPU, and the features of a whole large species would sit in memory at once).
MAP_MAX_PHOTOS = 50_000


def _photo_ids(cat: Catalogue, species_id: int | None) -> list[int]:
    """The photos a map shows: every photo of the species, or a seeded sample of :data:`MAP_MAX_PHOTOS` past it
    (the same sample every time for the same photo set, so the stored map is found again)."""
    ids = all_image_ids(cat, species_id=species_id)
    if len(ids) <= MAP_MAX_PHOTOS:
        return ids
    rng = np.random.default_rng(len(ids))
    return sorted(int(i) for i in rng.choice(np.asarray(ids, dtype=np.int64), size=MAP_MAX_PHOTOS, replace=False))


def map_path(cat: Catalogue, fingerprint: str, ids: list[int]) -> Path:
    digest = hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]
    return cat.cache_dir / "maps" / f"{fingerprint}-{digest}.npz"


def compute_map(cat: Catalogue, model: str, *, species_id: int | None = None, progress=None,
                should_cancel=None, seed: int = 0) -> dict[str, Any]:
    """Embed the photos (feature cache), project to 2-D, save; returns {path, n, seconds_umap, poincare}."""
    import time


    backbone = get_backbone(cat, model)
    ids = _photo_ids(cat, species_id)
    if len(ids) < 3:
        raise ValueError("a map needs at least 3 photos")
    emb = embed_images(cat, ids, backbone=backbone, progress=progress, should_cancel=should_cancel)
    t0 = time.perf_counter()
    xy = project_2d(emb, metric=backbone.config.metric, seed=seed)
    secs = time.perf_counter() - t0

    path = map_path(cat, backbone.config.fingerprint(), ids)
    atomic_write(path, lambda fh: np.savez(fh, ids=np.array(ids, dtype=np.int64), xy=xy,
                                           metric=backbone.config.metric, model=model))
    return {"path": str(path), "n": len(ids), "seconds_umap": secs, "poincare": backbone.config.metric == "lorentz",
            "model": model, "summary": f"map of {len(ids)} photos for {model} ({secs:.1f} s UMAP)"
                                       + (" (a seeded sample of the species)" if len(ids) == MAP_MAX_PHOTOS else "")}


def load_map(cat: Catalogue, model: str, *, species_id: int | None = None) -> dict[str, Any] | None:
    """The stored map of the current photo set (None when it must be computed), with per-photo facts."""
    ids = _photo_ids(cat, species_id)
    path = map_path(cat, get_backbone(cat, model).config.fingerprint(), ids)
    if not path.exists():
        return None
    data = np.load(path, allow_pickle=False)
    with cat.unit_of_work() as s:
        rows = {r[0]: r for r in s.execute(
            select(Image.id, Individual.name, Image.flank, Image.solidity, Species.name, Image.thumb_path,
                   Image.blob_path)
            .outerjoin(Individual, Image.individual_id == Individual.id)
            .join(Species, Image.species_id == Species.id).where(Image.id.in_(ids))).all()}
        decided = set(s.scalars(select(MatchDecision.query_image_id).where(MatchDecision.undone_at.is_(None))))
    pts = []
    for i, (x, y) in zip(data["ids"].tolist(), data["xy"].tolist()):
        r = rows.get(i)
        if r is None:
            continue
        thumb = cat.blobs.existing(r[5]) or cat.blobs.existing(r[6])
        pts.append({"id": i, "x": x, "y": y, "individual": r[1] or "(none)", "flank": r[2].value,
                    "solidity": r[3], "species": r[4], "undecided": r[1] is None and i not in decided,
                    "thumb": f"gradio_api/file={thumb}" if thumb else ""})
    return {"model": model, "poincare": str(data["metric"]) == "lorentz", "points": pts}
