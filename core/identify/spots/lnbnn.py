"""One-vs-gallery spot voting: HotSpotter's LNBNN (local naive-Bayes nearest neighbour, McCann & Lowe 2012;
Crall et al. 2013).

All gallery descriptors of a species go into one FAISS index (exact L2; binary descriptors are unpacked to 0/1
floats, whose squared L2 distance is the Hamming distance). For each query descriptor, its k + 1 nearest
gallery descriptors d_1 <= ... <= d_{k+1} are found, and each of the first k votes for the gallery photo that
owns it with weight d_{k+1} - d_i (how much closer it is than the "background" neighbour k + 1). A photo gets
at most one vote per query descriptor (its best), and its LNBNN score is the sum of its votes. Photos excluded
for a query (itself, its own sighting) are excluded inside the search (a FAISS ID selector), so the k + 1
neighbours are always valid ones.

This ranks the whole gallery without the global model's shortlist.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import faiss
import numpy as np

from core.identify.features import ExtractionCancelled
from core.identify.retrieval import faiss_search
from core.identify.spots.base import LocalFeatures

DEFAULT_K = 4


def _as_float(descriptors: np.ndarray) -> np.ndarray:
    d = np.asarray(descriptors)
    if d.dtype == np.uint8:  # packed binary descriptors -> 0/1 floats (squared L2 = Hamming)
        return np.ascontiguousarray(np.unpackbits(d, axis=1).astype(np.float32))
    return np.ascontiguousarray(d, dtype=np.float32)


#: Neighbours fetched beyond k + 1, so that excluded photos' descriptors (the query's own photo, its sighting)
#: can be dropped after the search while k + 1 valid neighbours remain (FAISS's BLAS path takes no ID filter).
OVERFETCH = 32
#: Up to this many gallery descriptors the search is exact; above, IVF with 4 sqrt(n) lists, IVF_NPROBE visited.
EXACT_UP_TO = 60_000
IVF_NPROBE = 16


@dataclass
class DescriptorIndex:
    """The descriptors of some gallery photos in one exact FAISS index; ``owner[j]`` is the gallery position of
    descriptor j (positions refer to the whole gallery, so several indexes can share them)."""

    index: faiss.Index
    owner: np.ndarray
    n_gallery: int
    binary: bool


def build_descriptor_index(gallery: Sequence[LocalFeatures], *, members: Sequence[int] | None = None,
                           approximate: bool | None = None, seed: int = 0,
                           reuse_training: bool = False) -> DescriptorIndex:
    """Index the descriptors of ``gallery`` (one LocalFeatures per gallery photo, in gallery order), or only of
    the gallery positions in ``members``; ``approximate`` (default: above :data:`EXACT_UP_TO` descriptors)
    builds a seeded IVF index, as HotSpotter used approximate (FLANN) neighbours."""
    if not gallery:
        raise ValueError("LNBNN needs at least one gallery photo")
    binary = gallery[0].descriptors.dtype == np.uint8
    positions = list(range(len(gallery))) if members is None else sorted(set(int(m) for m in members))
    blocks = [_as_float(gallery[p].descriptors) for p in positions]
    dim = max((b.shape[1] for b in blocks if b.shape[0]), default=0)
    if dim == 0:
        dim = max((_as_float(f.descriptors).shape[1] for f in gallery), default=0)
    if dim == 0:
        raise ValueError("the gallery descriptors have no dimensions (a dense matcher has no descriptors to vote)")
    blocks = [b if b.shape[1] == dim else np.zeros((0, dim), np.float32) for b in blocks]
    counts = np.array([b.shape[0] for b in blocks], dtype=np.int64)
    data = np.ascontiguousarray(np.concatenate(blocks)) if counts.sum() else np.zeros((0, dim), np.float32)
    index = _index_for(data, approximate=approximate, seed=seed, reuse_training=reuse_training)
    owner = np.repeat(np.asarray(positions, dtype=np.int64), counts)
    return DescriptorIndex(index=index, owner=owner, n_gallery=len(gallery), binary=binary)


_TRAINED: dict[tuple[int, int, int], faiss.Index] = {}


def _index_for(data: np.ndarray, *, approximate: bool | None, seed: int, reuse_training: bool = False) -> faiss.Index:
    """Exact L2 up to :data:`EXACT_UP_TO` descriptors, else IVF (k-means lists, :data:`IVF_NPROBE` visited).

    ``reuse_training`` (match review, whose gallery changes with every decision): the k-means lists trained for
    an earlier gallery of the same size class are reused and only the descriptors are added (the costly part
    of a build is the training); evaluations train afresh, seeded, so their numbers never depend on history."""
    n, dim = data.shape
    if approximate is None:
        approximate = n > EXACT_UP_TO
    if not approximate or n < 39 * 16:
        index = faiss.IndexFlatL2(dim)
        if n:
            index.add(data)
        return index
    nlist = 1 << int(round(np.log2(min(4096, max(16, 4 * np.sqrt(n))))))  # a power of two: stable size classes
    while nlist > 16 and nlist * 39 > n:
        nlist //= 2
    key = (dim, nlist, int(seed))
    if reuse_training and key in _TRAINED:
        index = faiss.clone_index(_TRAINED[key])
        index.add(data)
        index.nprobe = IVF_NPROBE
        return index
    quantizer = faiss.IndexFlatL2(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_L2)
    index.cp.seed = int(seed)
    n_train = min(n, 64 * nlist)
    sample = np.random.default_rng(seed).choice(n, size=n_train, replace=False) if n_train < n else slice(None)
    index.train(np.ascontiguousarray(data[sample]))
    if reuse_training:
        _TRAINED[key] = faiss.clone_index(index)  # trained, still empty
    index.add(data)
    index.nprobe = IVF_NPROBE
    return index


def lnbnn_scores(index: DescriptorIndex, query: LocalFeatures, *, k: int = DEFAULT_K,
                 exclude: Sequence[int] = ()) -> np.ndarray:
    """LNBNN score of every gallery photo (length ``n_gallery``) for one query; ``exclude`` lists gallery
    positions that may not vote (the query itself, its own sighting): they score 0 and are skipped in the
    neighbour lists (up to :data:`OVERFETCH` of their descriptors per query descriptor)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    scores = np.zeros(index.n_gallery, dtype=np.float64)
    total = int(index.index.ntotal)
    if query.n == 0 or total < 2:
        return scores
    q = _as_float(query.descriptors)
    kk = min(total, k + 1 + OVERFETCH)
    dist2, ids = faiss_search(index.index, q, kk)
    owners = np.where(ids >= 0, index.owner[np.maximum(ids, 0)], -1)
    bad = owners < 0
    if len(exclude):
        bad |= np.isin(owners, np.asarray(list(exclude), dtype=np.int64))
    # keep each row's first k + 1 valid neighbours (stable: still sorted by distance)
    order = np.argsort(bad, axis=1, kind="stable")[:, :k + 1]
    owners = np.take_along_axis(owners, order, axis=1)
    dist = np.sqrt(np.maximum(np.take_along_axis(dist2, order, axis=1).astype(np.float64), 0.0))
    ok = ~np.take_along_axis(bad, order, axis=1)
    n_ok = ok.sum(axis=1)
    rows = n_ok >= 2  # a descriptor needs a voter and a normaliser
    if not rows.any():
        return scores
    owners, dist, ok, n_ok = owners[rows], dist[rows], ok[rows], n_ok[rows]
    norm = dist[np.arange(dist.shape[0]), n_ok - 1][:, None]  # the last valid neighbour normalises
    voter = ok & (np.arange(dist.shape[1])[None, :] < (n_ok - 1)[:, None])
    votes = np.where(voter, norm - dist, 0.0)
    owners = np.where(voter, owners, -1)
    # one vote per (query descriptor, gallery photo): its best
    n_g = index.n_gallery
    keys = (np.arange(owners.shape[0], dtype=np.int64)[:, None] * n_g + owners).ravel()
    flat_votes = votes.ravel()
    ok = owners.ravel() >= 0
    keys, flat_votes = keys[ok], flat_votes[ok]
    order = np.lexsort((-flat_votes, keys))
    first = np.ones(order.size, dtype=bool)
    first[1:] = keys[order][1:] != keys[order][:-1]
    chosen = order[first]
    np.add.at(scores, keys[chosen] % n_g, flat_votes[chosen])
    return scores


def lnbnn_all_vs_all(features: Sequence[LocalFeatures], *, valid: np.ndarray, k: int = DEFAULT_K,
                     sides: Sequence[str] | None = None, progress: Callable[[int, int], None] | None = None,
                     should_cancel: Callable[[], bool] | None = None) -> np.ndarray:
    """N x N LNBNN scores inside one set: photo i queries every photo j with ``valid[i, j]`` (the others score
    0 and never take part in i's neighbourhoods).

    ``sides`` (e.g. flanks "left" / "right" / anything else) splits the gallery: a query of a side only
    searches photos that are not of the opposite side, one index per side, so opposite-flank photos (a large
    share) never crowd the neighbour lists. Other invalid pairs (the photo itself, its sighting) are dropped
    after the search."""
    n = len(features)
    valid = np.asarray(valid, dtype=bool)
    if valid.shape != (n, n):
        raise ValueError(f"valid must be {n} x {n}, got {valid.shape}")
    side = [s if s in ("left", "right") else "" for s in (sides if sides is not None else [""] * n)]
    opposite = {"left": "right", "right": "left", "": None}
    indexes: dict[str, DescriptorIndex] = {}
    out = np.zeros((n, n), dtype=np.float64)
    for i, f in enumerate(features):
        if should_cancel is not None and should_cancel():

            raise ExtractionCancelled(i, n)
        s = side[i]
        if s not in indexes:
            members = [j for j in range(n) if side[j] != opposite[s]] if opposite[s] else None
            indexes[s] = build_descriptor_index(features, members=members)
        out[i] = lnbnn_scores(indexes[s], f, k=k, exclude=np.flatnonzero(~valid[i]).tolist())
        out[i, ~valid[i]] = 0.0
        if progress is not None:
            progress(i + 1, n)
    return out
