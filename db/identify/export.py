"""Kaggle-format submission: embed each distinct image of ``test.csv`` once and
write ``row_id,similarity`` in input order (docs/DESIGN.md section 4, "Kaggle format")."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from core.identify.features import extract_features
from core.io.images import decode_image
from core.io.kaggle import check_images_exist, distinct_images, read_test_csv, score_pairs, write_submission
from core.identify.spots.stored import fuse_pairs
from core.inspect.variants import make_variant
from db.embeddings import get_backbone
from db.session import Catalogue
from db.identify.spots import folder_features, load_pipeline, matcher_for


def _file_key(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_loader(path: Path, variant: str) -> Callable[[], np.ndarray]:
    """Loader for a Kaggle image: ``full_rgb`` or, from the RGBA alpha, ``foreground_only``."""

    def load() -> np.ndarray:

        decoded = decode_image(path.read_bytes(), name=path.name)
        rgb = np.asarray(decoded.image)
        if variant == "full_rgb":
            return rgb
        if decoded.alpha is None:
            raise ValueError(f"{path.name} has no alpha channel, so it has no mask for the {variant!r} variant")
        return make_variant(rgb, decoded.alpha > 127, variant)

    return load


def export_kaggle(cat: Catalogue, *, test_csv: str | Path, images_dir: str | Path, model: str, out: str | Path,
                  variant: str = "full_rgb", progress: Callable[[int, int], None] | None = None,
                  should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Read and validate ``test_csv``, embed each referenced image once, score every row, write ``out``."""
    t0 = time.perf_counter()
    rows = read_test_csv(Path(test_csv))
    names = distinct_images(rows)
    images_dir = Path(images_dir)
    check_images_exist(names, images_dir)
    backbone = get_backbone(cat, model)
    paths = [images_dir / n for n in names]
    keys = [_file_key(p) for p in paths]  # each file hashed once: the feature and keypoint caches share it
    items = [(f"{k}-{variant}" if variant != "full_rgb" else k, folder_loader(p, variant)) for k, p in zip(keys, paths)]
    t1 = time.perf_counter()
    emb = extract_features(backbone, items, variant=variant, cache_dir=cat.cache_dir / "features",
                           progress=progress, should_cancel=should_cancel)
    t2 = time.perf_counter()
    metric = getattr(backbone, "metric", "cosine")
    sims = score_pairs(rows, emb, names, metric=metric)
    pipeline = load_pipeline(cat, model)
    spots = None
    if pipeline is not None and variant != "full_rgb":
        raise ValueError(f"{model} is a fused pipeline calibrated on full photos; export it with the full_rgb variant")
    if pipeline is not None:  # a fused pipeline: calibrated global + verified spot evidence per row
        matcher = matcher_for(pipeline)
        feats = folder_features(cat, paths, keys, matcher=matcher)
        pos = {n: i for i, n in enumerate(names)}
        sims, spots = fuse_pairs(pipeline, [(pos[r.query_image], pos[r.gallery_image]) for r in rows], sims, feats,
                                 matcher=matcher, progress=progress)
        metric = "probability"
    write_submission(Path(out), rows, sims)
    t3 = time.perf_counter()
    name = pipeline.name if pipeline is not None else backbone.config.name
    return {"rows": len(rows), "images": len(names), "out": str(out), "model": name,
            "variant": variant, "metric": metric, "seconds_embed": t2 - t1, "seconds_score_write": t3 - t2,
            "seconds_total": t3 - t0, "spots": spots,
            "summary": f"wrote {len(rows)} rows for {len(names)} images to {out}"
                       + (f" ({spots['with_spot_evidence']} with spot evidence)" if spots else "")}
