"""Retrieval metrics over a query x gallery score matrix (docs/DESIGN.md section 4).

Everything here reads only a score matrix ``similarity`` (higher = more alike, as returned by
:func:`core.similarity.pairwise_scores`), a relevance matrix or identity labels, and an optional ``valid`` mask
that removes gallery items from a query's ranking (self matches, same-sighting photos, the other flank, ...).
AP, first-hit rank, CMC@K, micro and identity-balanced macro averages; ties are order-invariant (permuting gallery
columns never changes a result), and NaN scores rank last.

The definitions and the tie conventions: docs/retrieval.md."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
_CHUNK_ELEMENTS = 1 << 22  # rows are processed in chunks of about this many matrix cells


@dataclass
class RetrievalResult:
    """Macro/micro mAP and CMC of one retrieval run, plus the per-query values behind them."""

    map_macro: float
    map_micro: float
    cmc_macro: dict[int, float]
    cmc_micro: dict[int, float]
    n_queries: int
    n_identities: int
    ap: np.ndarray = field(repr=False)
    first_hit_rank: np.ndarray = field(repr=False)
    query_index: np.ndarray = field(repr=False)

    def to_dict(self) -> dict:
        """JSON-friendly summary; NaN (no included query) becomes None, CMC keys become strings."""
        return {
            "map_macro": _json_float(self.map_macro),
            "map_micro": _json_float(self.map_micro),
            "cmc_macro": {str(k): _json_float(v) for k, v in self.cmc_macro.items()},
            "cmc_micro": {str(k): _json_float(v) for k, v in self.cmc_micro.items()},
            "n_queries": int(self.n_queries),
            "n_identities": int(self.n_identities),
        }


def _json_float(x: float) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def _prepare(
    similarity: np.ndarray, relevant: np.ndarray, valid: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check shapes; return (float scores with NaN -> -inf, bool relevance, bool validity)."""
    sim = np.asarray(similarity)
    if sim.ndim != 2:
        raise ValueError(f"similarity must be 2-D (Q x G), got shape {sim.shape}")
    if not np.issubdtype(sim.dtype, np.floating):
        sim = sim.astype(np.float64)
    rel = np.asarray(relevant, dtype=bool)
    if rel.shape != sim.shape:
        raise ValueError(f"relevant has shape {rel.shape}, similarity {sim.shape}")
    if valid is None:
        val = np.ones(sim.shape, dtype=bool)
    else:
        val = np.asarray(valid, dtype=bool)
        if val.shape != sim.shape:
            raise ValueError(f"valid has shape {val.shape}, similarity {sim.shape}")
    if np.isnan(sim).any():
        sim = np.where(np.isnan(sim), -np.inf, sim)
    return sim, rel, val


def _row_slices(n_rows: int, n_cols: int) -> list[slice]:
    """Row chunks of about _CHUNK_ELEMENTS cells, to bound memory on large galleries."""
    step = max(1, _CHUNK_ELEMENTS // max(n_cols, 1))
    return [slice(start, start + step) for start in range(0, n_rows, step)]


def _average_precision_block(sim: np.ndarray, pos: np.ndarray, val: np.ndarray) -> np.ndarray:
    """AP of each row of a chunk (sklearn tie convention); NaN where a row has no valid positive.

    Per positive p: AP term = #{positives with s >= s_p} / #{valid with s >= s_p}, i.e. the
    cumulative counts at the end of p's tie block in the descending sort.
    """
    n_rows, n_cols = sim.shape
    n_pos = pos.sum(axis=1)
    ap = np.full(n_rows, np.nan)
    if n_cols == 0 or not n_pos.any():
        return ap
    n_valid = val.sum(axis=1)
    # invalid items go to the end with key -inf (one tie block with any valid -inf score)
    key = np.where(val, sim, -np.inf)
    order = np.argsort(-key, axis=1)
    key_sorted = np.take_along_axis(key, order, axis=1)
    row, col = np.nonzero(np.take_along_axis(pos, order, axis=1))  # row-major: col ascends within a row
    # last sorted position of each positive's tie block
    is_end = np.ones((n_rows, n_cols), dtype=bool)
    is_end[:, :-1] = key_sorted[:, :-1] != key_sorted[:, 1:]
    if is_end.all():
        block_end = col
    else:
        end_idx = np.where(is_end, np.arange(n_cols), n_cols)
        end_idx = np.minimum.accumulate(end_idx[:, ::-1], axis=1)[:, ::-1]
        block_end = end_idx[row, col]
    # everything before the final -inf block is valid, so the valid count up to a position is
    # position + 1, capped by the row's number of valid items (the -inf block ends the row)
    count_at_end = np.minimum(block_end + 1, n_valid[row])
    # positives up to the block end = 1-based ordinal of the last positive in the same block
    ordinal = np.arange(1, row.size + 1) - np.concatenate([[0], np.cumsum(n_pos)[:-1]])[row]
    last_in_block = np.ones(row.size, dtype=bool)
    last_in_block[:-1] = (row[:-1] != row[1:]) | (block_end[:-1] != block_end[1:])
    last_idx = np.where(last_in_block, np.arange(row.size), row.size)
    last_idx = np.minimum.accumulate(last_idx[::-1])[::-1]
    pos_at_end = ordinal[last_idx]
    total = np.bincount(row, weights=pos_at_end / count_at_end, minlength=n_rows)
    has_pos = n_pos > 0
    ap[has_pos] = total[has_pos] / n_pos[has_pos]
    return ap


def average_precision(
    similarity: np.ndarray, relevant: np.ndarray, *, valid: np.ndarray | None = None
) -> np.ndarray:
    """AP of every query (Q,), NaN where a query has no valid positive.

    AP(q) = (1/|P_q|) * sum_{g in P_q} precision at g's tie block end, over the
    gallery items with ``valid[q, g]`` (all when ``valid`` is None); a positive
    is ``relevant[q, g] and valid[q, g]``. Ties as ``sklearn.metrics.average_precision_score``.
    """
    sim, rel, val = _prepare(similarity, relevant, valid)
    pos = rel & val
    out = np.empty(sim.shape[0], dtype=np.float64)
    for rows in _row_slices(*sim.shape):
        out[rows] = _average_precision_block(sim[rows], pos[rows], val[rows])
    return out


def first_hit_rank(
    similarity: np.ndarray, relevant: np.ndarray, *, valid: np.ndarray | None = None
) -> np.ndarray:
    """1-based rank of each query's first correct match (Q,) as float, NaN without a valid positive.

    rank(q) = 1 + #{g valid, not relevant : s(q, g) >= max_{p valid, relevant} s(q, p)}
    (pessimistic for ties with negatives, order-invariant).
    """
    sim, rel, val = _prepare(similarity, relevant, valid)
    pos = rel & val
    neg = val & ~rel
    out = np.empty(sim.shape[0], dtype=np.float64)
    for rows in _row_slices(*sim.shape):
        s, p, n = sim[rows], pos[rows], neg[rows]
        if s.shape[1] == 0:
            out[rows] = np.nan
            continue
        best = np.max(np.where(p, s, -np.inf), axis=1)
        ahead = np.sum(n & (s >= best[:, None]), axis=1)
        out[rows] = np.where(p.any(axis=1), 1.0 + ahead, np.nan)
    return out


def _identity_balanced(values: np.ndarray, identity_codes: np.ndarray) -> float:
    """mean over identities of (mean of that identity's values)."""
    if values.size == 0:
        return float("nan")
    counts = np.bincount(identity_codes)
    sums = np.bincount(identity_codes, weights=values.astype(np.float64))
    present = counts > 0
    return float(np.mean(sums[present] / counts[present]))


def summarize(
    ap: np.ndarray, ranks: np.ndarray, query_labels: Sequence, *, ks: Sequence[int] = DEFAULT_KS
) -> RetrievalResult:
    """Turn per-query AP and first-hit ranks (NaN = excluded query) into a :class:`RetrievalResult`."""
    ap = np.asarray(ap, dtype=np.float64)
    ranks = np.asarray(ranks, dtype=np.float64)
    labels = np.asarray(query_labels)
    if not (ap.shape == ranks.shape == labels.shape[:1]) or labels.ndim != 1:
        raise ValueError("ap, ranks and query_labels must have the same length")
    included = ~np.isnan(ap)
    idx = np.flatnonzero(included)
    ap_in, rank_in = ap[idx], ranks[idx]
    if idx.size:
        _, codes = np.unique(labels[idx], return_inverse=True)
        codes = codes.reshape(-1)
    else:
        codes = np.zeros(0, dtype=np.int64)
    n_q = int(idx.size)
    cmc_macro: dict[int, float] = {}
    cmc_micro: dict[int, float] = {}
    for k in ks:
        hit = (rank_in <= k).astype(np.float64)
        cmc_micro[int(k)] = float(hit.mean()) if n_q else float("nan")
        cmc_macro[int(k)] = _identity_balanced(hit, codes)
    return RetrievalResult(
        map_macro=_identity_balanced(ap_in, codes),
        map_micro=float(ap_in.mean()) if n_q else float("nan"),
        cmc_macro=cmc_macro,
        cmc_micro=cmc_micro,
        n_queries=n_q,
        n_identities=int(codes.max() + 1) if n_q else 0,
        ap=ap_in,
        first_hit_rank=rank_in.astype(np.int64),
        query_index=idx,
    )


def relevance(query_labels: Sequence, gallery_labels: Sequence) -> np.ndarray:
    """relevant[q, g] = (id(q) == id(g)), Q x G bool."""
    q = np.asarray(query_labels)
    g = np.asarray(gallery_labels)
    if q.ndim != 1 or g.ndim != 1:
        raise ValueError("labels must be 1-D")
    return q[:, None] == g[None, :]


def retrieval_metrics(
    similarity: np.ndarray,
    query_labels: Sequence,
    gallery_labels: Sequence,
    *,
    valid: np.ndarray | None = None,
    ks: Sequence[int] = DEFAULT_KS,
) -> RetrievalResult:
    """Macro/micro mAP and CMC@K for a Q x G score matrix with relevance id(q) == id(g).

    Queries without a valid positive are excluded (``n_queries`` counts the rest).
    """
    sim = np.asarray(similarity)
    rel = relevance(query_labels, gallery_labels)
    if rel.shape != sim.shape:
        raise ValueError(f"labels give {rel.shape}, similarity is {sim.shape}")
    ap = average_precision(sim, rel, valid=valid)
    ranks = first_hit_rank(sim, rel, valid=valid)
    return summarize(ap, ranks, query_labels, ks=ks)


def _is_unknown(value: object) -> bool:
    return value is None or (isinstance(value, str) and value == "") or (
        isinstance(value, float) and math.isnan(value)
    )


def same_sighting_mask(sightings: Sequence, other: Sequence | None = None) -> np.ndarray:
    """mask[i, j] = (sighting i == sighting j), both known; unknown sightings (None, '', NaN) match nothing."""
    a = list(np.asarray(sightings, dtype=object).tolist())
    b = a if other is None else list(np.asarray(other, dtype=object).tolist())
    codes: dict[object, int] = {}
    # integer codes: equal known sightings share a code >= 0; each unknown gets its own negative code
    code_a = np.array([-1 - i if _is_unknown(v) else codes.setdefault(v, len(codes)) for i, v in enumerate(a)])
    code_b = np.array(
        [-1 - len(a) - i if _is_unknown(v) else codes.setdefault(v, len(codes)) for i, v in enumerate(b)]
    )
    if other is None:
        code_b = code_a
    return (code_a[:, None] == code_b[None, :]) & (code_a >= 0)[:, None]


def all_vs_all_valid(
    n: int, *, sightings: Sequence | None = None, exclude_same_sighting: bool = True
) -> np.ndarray:
    """N x N gallery mask of the all-vs-all protocol: never self; not the same sighting if asked."""
    valid = ~np.eye(n, dtype=bool)
    if sightings is not None and exclude_same_sighting:
        if len(sightings) != n:
            raise ValueError(f"{len(sightings)} sightings for {n} images")
        valid &= ~same_sighting_mask(sightings)
    return valid


def all_vs_all_metrics(
    similarity: np.ndarray,
    labels: Sequence,
    *,
    sightings: Sequence | None = None,
    exclude_same_sighting: bool = True,
    ks: Sequence[int] = DEFAULT_KS,
) -> RetrievalResult:
    """All-vs-all retrieval inside one set (N x N scores): every image queries all others.

    Self is always excluded; with ``sightings`` and ``exclude_same_sighting`` the
    gallery items from the query's own sighting are excluded too.
    """
    sim = np.asarray(similarity)
    if sim.ndim != 2 or sim.shape[0] != sim.shape[1]:
        raise ValueError(f"all-vs-all needs a square matrix, got {sim.shape}")
    valid = all_vs_all_valid(sim.shape[0], sightings=sightings, exclude_same_sighting=exclude_same_sighting)
    return retrieval_metrics(sim, labels, labels, valid=valid, ks=ks)
