"""Identity-aware batches with hard negatives (VisME), pre-scheduled for a whole training run -- pure numpy.

A *source* is the per-photo string in ``sources`` (a benchmark, or a species); an *identity* is a code of
``codes``; a *group* is ``per_identity`` photos of one identity. :func:`identity_aware_schedule` mixes K sources
per batch, draws anchor identities in proportion to their photo counts, and lets each anchor bring up to k hard
negatives (:class:`HardNegatives`: curators' "not the same" decisions first, then the frozen model's closest
wrong identities). An identity is at most one group per batch, and the same seed gives the same schedule.

The drawing rules, what they guarantee and the order of a batch's rows: docs/training.md."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["HardNegatives", "check_schedule", "hard_negative_table", "identity_aware_schedule",
           "sources_in_batch"]


@dataclass(frozen=True)
class HardNegatives:
    """An identity's hard negatives: the identities curators marked "not the same" against it, then the frozen
    model's highest-ranked wrong identities filling up to k (the table never holds more than k in all)."""

    decided: tuple[int, ...]
    ranked: tuple[int, ...]

    @property
    def codes(self) -> tuple[int, ...]:
        """Decided then ranked."""
        return self.decided + self.ranked


def sources_in_batch(n_sources: int, sources_per_batch: int | None) -> int:
    """K: the sources each batch mixes (``sources_per_batch``, or every source up to 2 when None)."""
    return sources_per_batch if sources_per_batch is not None else min(2, n_sources)


def _identity_sources(codes: np.ndarray, sources: Sequence[str]) -> dict[int, str]:
    """Each identity's source; an identity whose photos come from several sources is refused."""
    if len(codes) != len(sources):
        raise ValueError(f"{len(codes)} identity codes but {len(sources)} sources: one source per photo is needed")
    out: dict[int, str] = {}
    for code, src in zip(np.asarray(codes).tolist(), sources):
        seen = out.setdefault(int(code), str(src))
        if seen != str(src):
            raise ValueError(f"identity {int(code)} has photos in two sources ({seen!r} and {str(src)!r}); "
                             "an identity belongs to one benchmark or species")
    return out


def check_schedule(codes: np.ndarray, sources: Sequence[str], *, identities_per_batch: int, per_identity: int,
                   sources_per_batch: int | None) -> None:
    """ValueError with a clear message when the data cannot fill the batches asked for: no photos, more sources
    per batch than there are sources, a source with fewer than 2 identities (its part of a batch would hold no
    negative), fewer identities per batch than sources per batch, an identity in several sources. Called before
    any photo is embedded.

    More identities per batch than the data has is not refused here (a batch then holds them all, as the
    m-per-class sampler does); the queue-time check refuses it when it was asked for explicitly."""
    if per_identity < 1:
        raise ValueError(f"photos per identity must be at least 1, got {per_identity}")
    if identities_per_batch < 1:
        raise ValueError(f"identities per batch must be at least 1, got {identities_per_batch}")
    if len(codes) == 0:
        raise ValueError("the identity-aware sampler has no training photos to schedule")
    owner = _identity_sources(codes, sources)
    by_source: dict[str, int] = {}
    for src in owner.values():
        by_source[src] = by_source.get(src, 0) + 1
    names = sorted(by_source)
    if sources_per_batch is not None and sources_per_batch < 1:
        raise ValueError(f"sources per batch must be at least 1, got {sources_per_batch}")
    k = sources_in_batch(len(names), sources_per_batch)
    if k > len(names):
        raise ValueError(f"{k} sources per batch asked for, but the training photos come from {len(names)} "
                         f"source(s) ({', '.join(names)}); ask for at most {len(names)}")
    thin = [s for s in names if by_source[s] < 2]
    if thin:
        raise ValueError(f"source(s) {', '.join(repr(s) for s in thin)} have a single identity among the training "
                         "photos; each source needs at least 2 so that its part of a batch holds negatives")
    if identities_per_batch < k:
        raise ValueError(f"{identities_per_batch} identities per batch cannot be split over {k} sources per batch; "
                         f"ask for at least {k} identities per batch (or fewer sources per batch)")


def hard_negative_table(codes: np.ndarray, names: Sequence[str], *, decided: Sequence[tuple[str, str]],
                        features: np.ndarray, k: int,
                        sources: Sequence[str] | None = None) -> dict[int, HardNegatives]:
    """For every identity code: up to k hard negatives, first the identities curators marked "not the same"
    against it (pairs of names, symmetric, in the order given; names not in the training set and an identity
    paired with itself ignored), then, while fewer than k, the identities whose centroid (mean of L2-normalised
    ``features`` rows, N x D aligned with codes) is most similar by cosine among the wrong ones (ties broken by
    code). With ``sources`` (one per row) the ranked fill keeps to the identity's own source, where the schedule
    can use it."""
    codes = np.asarray(codes, dtype=np.int64)
    present = sorted(int(c) for c in np.unique(codes))
    if k < 0:
        raise ValueError(f"hard negatives per identity must not be negative, got {k}")
    if k == 0 or not present:
        return {c: HardNegatives((), ()) for c in present}
    index = {str(n): i for i, n in enumerate(names)}
    known = set(present)
    chosen: dict[int, list[int]] = {c: [] for c in present}
    for a, b in decided:
        ca, cb = index.get(str(a)), index.get(str(b))
        if ca is None or cb is None or ca == cb or ca not in known or cb not in known:
            continue
        for x, y in ((ca, cb), (cb, ca)):
            if y not in chosen[x] and len(chosen[x]) < k:
                chosen[x].append(y)
    feats = np.asarray(features, dtype=np.float64)
    if feats.shape[0] != len(codes):
        raise ValueError(f"{feats.shape[0]} feature rows for {len(codes)} photos")
    feats = feats.reshape(len(codes), -1)
    feats = feats / np.maximum(np.linalg.norm(feats, axis=1, keepdims=True), 1e-12)
    centroids = np.stack([feats[codes == c].mean(axis=0) for c in present])
    centroids = centroids / np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    source_of = {int(c): str(s) for c, s in zip(codes, sources)} if sources is not None else {}
    sim = np.round(centroids @ centroids.T, 10)  # rounded: equal similarities tie exactly, then the code decides
    order = np.asarray(present)
    table: dict[int, HardNegatives] = {}
    for i, c in enumerate(present):
        room = k - len(chosen[c])
        ranked: list[int] = []
        if room > 0:
            for j in np.lexsort((order, -sim[i])):
                other = int(order[j])
                if other == c or other in chosen[c]:
                    continue
                if source_of and source_of[other] != source_of[c]:
                    continue
                ranked.append(other)
                if len(ranked) == room:
                    break
        table[c] = HardNegatives(tuple(chosen[c]), tuple(ranked))
    return table


def _generator(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed % (1 << 64), epoch, 0x5EED]))


def _weighted_pick(rng: np.random.Generator, weights: np.ndarray) -> int:
    p = weights / weights.sum()
    return int(rng.choice(len(weights), p=p))


def identity_aware_schedule(codes: np.ndarray, sources: Sequence[str], *, hard_negatives: Mapping[int, HardNegatives],
                            epochs: int, steps_per_epoch: int, identities_per_batch: int, per_identity: int,
                            sources_per_batch: int | None, seed: int) -> list[list[np.ndarray]]:
    """The whole run's batches, pre-scheduled from the seed (VisME): [epoch][step] -> row indices into codes
    (the rules are the module's). Refused as :func:`check_schedule` refuses."""
    check_schedule(codes, sources, identities_per_batch=identities_per_batch, per_identity=per_identity,
                   sources_per_batch=sources_per_batch)
    if epochs < 1 or steps_per_epoch < 1:
        raise ValueError(f"a schedule needs at least one epoch and one step (got {epochs} x {steps_per_epoch})")
    codes = np.asarray(codes, dtype=np.int64)
    owner = _identity_sources(codes, sources)
    source_names = sorted(set(owner.values()))
    rows_of = {c: np.flatnonzero(codes == c) for c in sorted(owner)}
    members = {s: np.array(sorted(c for c, o in owner.items() if o == s), dtype=np.int64) for s in source_names}
    id_weights = {s: np.array([len(rows_of[int(c)]) for c in members[s]], dtype=np.float64) for s in source_names}
    src_weights = np.array([id_weights[s].sum() for s in source_names])
    position = {s: {int(c): i for i, c in enumerate(members[s])} for s in source_names}
    k = sources_in_batch(len(source_names), sources_per_batch)
    per_source_cap = identities_per_batch // k

    def group(rng: np.random.Generator, code: int) -> np.ndarray:
        rows = rows_of[code]
        return rng.choice(rows, size=per_identity, replace=len(rows) < per_identity)

    def one_batch(rng: np.random.Generator) -> np.ndarray:
        left = src_weights.copy()
        picked: list[str] = []
        for _ in range(k):
            j = _weighted_pick(rng, left)
            picked.append(source_names[j])
            left[j] = 0.0
        g = min(per_source_cap, min(len(members[s]) for s in picked))
        in_batch: set[int] = set()
        parts: list[np.ndarray] = []
        for s in picked:
            weights = id_weights[s].copy()
            n = 0
            while n < g:
                pick = _weighted_pick(rng, weights)
                anchor = int(members[s][pick])
                weights[pick] = 0.0  # drawn: never again in this batch
                negatives = hard_negatives.get(anchor)
                joining = [anchor] + ([int(h) for h in negatives.codes] if negatives is not None else [])
                for code in joining:
                    if n >= g or code in in_batch or owner.get(code) != s:
                        continue
                    in_batch.add(code)
                    weights[position[s][code]] = 0.0
                    parts.append(group(rng, code))
                    n += 1
        return np.concatenate(parts).astype(np.int64)

    schedule: list[list[np.ndarray]] = []
    for epoch in range(1, epochs + 1):
        rng = _generator(seed, epoch)
        schedule.append([one_batch(rng) for _ in range(steps_per_epoch)])
    return schedule
