"""The calibrated probability of a new animal (core.field.new_animal): the protocol by hand on a small score
matrix, and the issue's measure on the shared nyala split (identity split, 30% test, seed 0): a random third of the
test identities made new (one photo each a query, their other photos out of the gallery), every other test photo a
query against the rest; p(new) fitted on the same protocol over the train identities must have an expected
calibration error below 0.10 over the queries. The offline default backbone's features are cached in pytest's
cache folder, so only the first run embeds the 1,213 photos."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from core.identify.backbones import DEFAULT_BACKBONE, create_backbone
from core.identify.features import extract_features
from core.field import new_animal as na
from core.io.images import load_rgb
from core.similarity import pairwise_scores
from core.identify.splits import make_split
from tests.conftest import SHARED_NYALA_DIR, shared_nyala_present


def test_the_protocol_by_hand():
    # photos: a a b b c c; all-vs-all scores, same animal 0.9, else 0.1 (0.3 between b and c)
    labels = list("aabbcc")
    sim = np.full((6, 6), 0.1)
    for i in range(6):
        for j in range(6):
            if labels[i] == labels[j]:
                sim[i, j] = 0.9
            elif {labels[i], labels[j]} == {"b", "c"}:
                sim[i, j] = 0.3
    q = na.novelty_queries(sim, labels, share=1 / 3, seed=0)
    new = q.new_identities
    assert len(new) == 1  # round(3 / 3)
    new_photos = [i for i, lab in enumerate(labels) if lab in new]
    assert len(set(q.query) & set(new_photos)) == 1  # one photo of the new animal is a query
    assert q.query.size == 5  # it, and the four photos of the two known animals
    for k, i in enumerate(q.query):
        assert q.is_new[k] == (labels[i] in new)
        assert q.top1[k] == pytest.approx(0.3 if labels[i] in new and new[0] != "a" else
                                          0.1 if labels[i] in new else 0.9)
    # a query whose only other photo shares its sighting has nothing of its own left: new
    q2 = na.novelty_queries(sim, labels, sightings=["s1", "s1", "s2", "s3", "s4", "s5"], share=0.01, seed=0)
    first = list(q2.query).index(0)
    assert q2.is_new[first] and not q2.is_new[list(q2.query).index(2)]


def test_fit_is_refused_without_both_outcomes():
    q = na.NoveltyQueries(query=np.arange(12), top1=np.linspace(0, 1, 12), gap=np.zeros(12),
                          is_new=np.zeros(12, dtype=bool))
    with pytest.raises(ValueError, match="both new and known"):
        na.fit_new_animal(q)


def _pooled(queries: list[na.NoveltyQueries]) -> na.NoveltyQueries:
    return na.NoveltyQueries(query=np.concatenate([q.query for q in queries]),
                             top1=np.concatenate([q.top1 for q in queries]),
                             gap=np.concatenate([q.gap for q in queries]),
                             is_new=np.concatenate([q.is_new for q in queries]))


@pytest.mark.skipif(not shared_nyala_present(),
                    reason="../shared/data/nyala is absent here (CI has it): p(new) on the nyala split is not measured")
def test_p_new_is_calibrated_on_the_shared_nyala_split(request, capsys):
    with open(SHARED_NYALA_DIR / "manifest.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    items = [(r["filename"], lambda p=SHARED_NYALA_DIR / "images" / r["filename"]: load_rgb(str(p))) for r in rows]
    backbone = create_backbone(DEFAULT_BACKBONE)
    emb = extract_features(backbone, items, variant="full_rgb", cache_dir=request.config.cache.mkdir("nyala-features"))
    labels = [r["identity"] for r in rows]
    is_test = make_split("identity", labels, test_fraction=0.3, seed=0)
    sim = pairwise_scores(emb, emb, metric=backbone.config.metric)
    fit = _pooled([na.novelty_queries(sim, labels, query_pool=~is_test, seed=s) for s in range(5)])
    cal = na.fit_new_animal(fit)
    draws = [na.novelty_queries(sim, labels, query_pool=is_test, seed=100 + s) for s in range(10)]
    eces = [na.measure(cal, q)["ece"] for q in draws]
    with capsys.disabled():
        print(f"\np(new) on the nyala test identities ({draws[0].query.size} queries, {int(draws[0].is_new.sum())} "
              f"new): ECE {eces[0]:.3f}; over 10 random thirds {min(eces):.3f} to {max(eces):.3f}")
    assert all(not (set(q.new_identities) - set(np.asarray(labels)[is_test])) for q in draws)
    assert max(eces) < 0.10
