"""Spot evidence (local keypoints) on the nyala photos: extraction, shortlist verification, LNBNN, full evaluation.

Rows:

1. Keypoints per photo: ``sift`` (RootSIFT, default settings: 512 px, <= 1,000 keypoints) and ``orb`` extraction
   time per photo (``matcher.extract``, JPEG decode excluded) on the whole photo and on its GrabCut mask, and the
   mean number of keypoints for each. The sample is whole identities (seeded), so it also holds true matches.
   Then keypoints per masked photo and extraction time of each SIFT setting measured for the default
   (:data:`SIFT_VARIANTS`: the mask's bounding crop at 512 / 768 / 1024 px, contrast threshold 0.02, the mask
   dilated by 4 px), each time also as a multiple of the plain matcher's.
2. Verifying one query's 50-candidate shortlist once keypoints are cached: ``verify_one`` (ratio-test matching +
   USAC/MAGSAC++ homography) on 50 pairs, median over the queries (goal < 1 s), per-pair ms, and the time to read
   the 51 photos' keypoints back from the on-disk cache. Every candidate is matched and verified, also the
   opposite-flank ones the app skips, so this is an upper bound for a real shortlist.
3. LNBNN per query: ``build_descriptor_index`` over a gallery of N masked photos and ``lnbnn_scores`` per query
   (median over the queries). When the masked sample is smaller than N, the gallery repeats the sample's real
   masked keypoints until N photos, so the timing is that of N masked photos without GrabCut-masking N photos
   here: exact for a flat index (its cost does not depend on what the descriptors hold), an estimate for the IVF
   index used above ``EXACT_UP_TO`` descriptors (its k-means sees repeated descriptors).
4. A full fused evaluation of nyala (``db.identify.spots.evaluate_pipeline``, ``sift`` pipeline on efficientnet_lite0):
   only with the full nyala set and ``ROSETTE_BENCH_FULL_SPOTS=1`` (about 10 minutes: GrabCut masks for ~700
   photos, then the evaluation); otherwise a row says it was skipped and how to run it.

Data: ``../shared/data/nyala`` (``manifest.csv`` + ``images/``; env ``ROSETTE_BENCH_NYALA``), else the
repository's ``assets/demo`` nyala photos. Environment: ``ROSETTE_BENCH_SPOTS_SAMPLE`` (default 56 photos,
GrabCut-masked with 2 threads), ``ROSETTE_BENCH_SPOTS_QUERIES`` (default 10), ``ROSETTE_BENCH_SPOTS_GALLERY``
(default 300). Rows 1-3 take about 2 minutes on 2 cores (3 when the machine is busy).

Run: ``.venv/bin/python tests/benchmarks/run.py spots``.
"""

from __future__ import annotations

import csv
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NYALA = Path(os.environ.get("ROSETTE_BENCH_NYALA", ROOT.parent / "shared" / "data" / "nyala"))
DEMO = ROOT / "assets" / "demo"
SAMPLE = int(os.environ.get("ROSETTE_BENCH_SPOTS_SAMPLE", "56"))
QUERIES = int(os.environ.get("ROSETTE_BENCH_SPOTS_QUERIES", "10"))
GALLERY = int(os.environ.get("ROSETTE_BENCH_SPOTS_GALLERY", "300"))
SHORTLIST = 50
FULL_ENV = "ROSETTE_BENCH_FULL_SPOTS"
FULL_NYALA_MIN = 1000  # photos: the shared set has 1,213; the demo subset 60
RUN_FULL = f"{FULL_ENV}=1 .venv/bin/python tests/benchmarks/run.py spots"


def _manifest(folder: Path) -> list[dict[str, str]]:
    """Manifest rows whose photo is present."""
    path = folder / "manifest.csv"
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if (folder / "images" / r["filename"]).exists()]


def _source() -> tuple[Path, list[dict[str, str]], str]:
    rows = _manifest(NYALA)
    if rows:
        return NYALA, rows, f"nyala ({len(rows)} photos at {NYALA})"
    rows = _manifest(DEMO)
    if not rows:
        raise FileNotFoundError(f"no nyala photos: neither {NYALA}/manifest.csv nor {DEMO}/manifest.csv")
    return DEMO, rows, f"assets/demo nyala photos ({len(rows)}; {NYALA} is missing)"


def _sample(rows: list[dict[str, str]], n: int, seed: int = 0) -> list[dict[str, str]]:
    """Whole identities in seeded random order until ``n`` photos (so queries have true matches in the sample)."""
    by_id: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_id.setdefault(r["identity"], []).append(r)
    out: list[dict[str, str]] = []
    for ident in np.random.default_rng(seed).permutation(sorted(by_id)):
        if len(out) >= n:
            break
        out.extend(by_id[str(ident)])
    return out[:n]


def _ms(seconds: float) -> float:
    return 1000.0 * seconds


def _extraction_rows(photos, masks, sift, orb, *, note_data: str, t_mask: float, area: float):
    """Row 1: per-photo extraction time and keypoints, whole photo and on the mask; returns (rows, features)."""
    from core.identify.spots import MIN_KEYPOINTS

    rows: list[dict] = []
    feats: dict[tuple[str, bool], list] = {}
    empty = sum(not m.any() for m in masks)
    for matcher in (sift, orb):
        name = matcher.config.name
        matcher.extract(photos[0][:64, :64])  # warm-up (detector creation, OpenCV thread pool)
        for masked in (False, True):
            times, out = [], []
            for rgb, m in zip(photos, masks):
                t0 = time.perf_counter()
                out.append(matcher.extract(rgb, m if masked and m.any() else None))
                times.append(time.perf_counter() - t0)
            feats[(name, masked)] = out
            kp = np.array([f.n for f in out], dtype=float)
            where = "GrabCut mask" if masked else "whole photo"
            extra = (f"; masks: GrabCut (default settings) took {t_mask:.0f} s for {len(photos)} photos with 2 "
                     f"threads, mean mask area {100 * area:.0f}% of the photo, {empty} empty (those use the whole "
                     "photo, as features_for does)") if masked else ""
            rows.append({"benchmark": f"{name} keypoints, {where}: extraction per photo",
                         "value": _ms(float(np.mean(times))), "unit": "ms",
                         "note": f"mean over {len(photos)} photos (median {_ms(statistics.median(times)):.0f} ms), "
                                 f"{matcher.config.max_side} px, <= {matcher.config.max_keypoints} keypoints, "
                                 f"decode excluded; {note_data}{extra}"})
            rows.append({"benchmark": f"{name} keypoints, {where}: keypoints per photo",
                         "value": float(kp.mean()), "unit": "keypoints",
                         "note": f"median {np.median(kp):.0f}, min {kp.min():.0f}, max {kp.max():.0f}; "
                                 f"{int((kp < MIN_KEYPOINTS).sum())} photos below {MIN_KEYPOINTS} "
                                 "(no spot evidence)"})
    return rows, feats


#: SIFT settings measured beside the default on the masked photos (keypoints per photo and extraction time):
#: today's plain matcher first, every other one's time given as a multiple of it
SIFT_VARIANTS = {
    "512 px, whole photo (the plain matcher)": {"crop": False, "max_side": 512},
    "mask's crop at 512 px": {"crop": True, "max_side": 512},
    "mask's crop at 768 px": {"crop": True, "max_side": 768},
    "mask's crop at 1024 px": {"crop": True, "max_side": 1024},
    "512 px, contrast threshold 0.02": {"crop": False, "max_side": 512, "contrast_threshold": 0.02},
    "512 px, mask dilated 4 px": {"crop": False, "max_side": 512, "mask_dilate": 4},
}


def _sift_variant_rows(photos, masks, *, note_data: str) -> list[dict]:
    """Keypoints per masked photo and extraction time of each :data:`SIFT_VARIANTS` setting."""
    from core.identify.spots import create_matcher

    rows: list[dict] = []
    base = None
    for name, opts in SIFT_VARIANTS.items():
        matcher = create_matcher("sift", **opts)
        matcher.extract(photos[0][:64, :64])  # warm-up
        times, kps = [], []
        for rgb, m in zip(photos, masks):
            t0 = time.perf_counter()
            kps.append(matcher.extract(rgb, m if m.any() else None).n)
            times.append(time.perf_counter() - t0)
        ms = _ms(float(np.mean(times)))
        base = ms if base is None else base
        rows.append({"benchmark": f"sift {name}, GrabCut mask: extraction per photo", "value": ms, "unit": "ms",
                     "note": f"{ms / base:.2f}x the plain matcher's; mean over {len(photos)} photos, decode "
                             f"excluded; {note_data}"})
        rows.append({"benchmark": f"sift {name}, GrabCut mask: keypoints per photo", "value": float(np.mean(kps)),
                     "unit": "keypoints", "note": f"median {np.median(kps):.0f}; <= {matcher.config.max_keypoints}"})
    return rows


def _queries(sample: list[dict[str, str]], k: int) -> list[int]:
    return sorted({int(i) for i in np.linspace(0, len(sample) - 1, num=min(k, len(sample)))})


def _candidates(sample: list[dict[str, str]], q: int, k: int) -> list[int]:
    """``k`` shortlist positions for query ``q``: its own identity first (as a good global shortlist would have
    them), then the rest in seeded order; never the query itself nor its own sighting."""
    rq = sample[q]
    ok = [j for j in range(len(sample)) if j != q and not (rq.get("sighting") and sample[j].get("sighting") ==
                                                           rq["sighting"])]
    same = [j for j in ok if sample[j]["identity"] == rq["identity"]]
    rest = [j for j in np.random.default_rng(q).permutation(ok).tolist() if j not in same]
    return (same + rest)[:k]


def _verify_rows(sample, feats, sift, orb, cache_dir: Path) -> list[dict]:
    """Row 2: one query's shortlist, matched and verified from cached keypoints."""
    from core.identify.spots import features_cache_path, load_features, save_features
    from core.identify.spots.pipeline import PipelineSettings, verify_one

    rows: list[dict] = []
    queries = _queries(sample, QUERIES)
    k = min(SHORTLIST, len(sample) - 2)
    short = {q: _candidates(sample, q, k) for q in queries}
    if k < SHORTLIST:
        rows.append({"benchmark": "verification shortlist", "value": k, "unit": "candidates",
                     "note": f"only {len(sample)} photos in the sample: shortlists of {k}, not {SHORTLIST}"})

    # the keypoint cache as features_for reads it: one npz per (photo, mask, matcher config)
    fp = sift.config.fingerprint()
    paths = [features_cache_path(cache_dir, fp, f"photo{i:05d}-mgrabcut") for i in range(len(sample))]
    for p, f in zip(paths, feats[("sift", True)]):
        save_features(p, f)
    loads = []
    for q in queries:
        t0 = time.perf_counter()
        got = [load_features(paths[j]) for j in [q] + short[q]]
        loads.append(time.perf_counter() - t0)
        assert all(g is not None for g in got)
    rows.append({"benchmark": f"read a query's {k + 1} cached sift keypoint files (npz)",
                 "value": _ms(statistics.median(loads)), "unit": "ms",
                 "note": f"median over {len(queries)} queries; masked photos; what features_for does on a cache hit "
                         "(besides its catalogue look-up)"})

    for name, masked, matcher in (("sift", True, sift), ("sift", False, sift), ("orb", True, orb)):
        settings = PipelineSettings(matcher=name)
        fs = feats[(name, masked)]
        verify_one(matcher, fs[queries[0]], fs[short[queries[0]][0]], settings)  # warm-up
        per_query, per_pair, inliers, tentative, statuses = [], [], [], [], {}
        for q in queries:
            t_q = time.perf_counter()
            for j in short[q]:
                t0 = time.perf_counter()
                v = verify_one(matcher, fs[q], fs[j], settings)
                per_pair.append(time.perf_counter() - t0)
                inliers.append(v.n_inliers)
                tentative.append(v.n_tentative)
                statuses[v.status] = statuses.get(v.status, 0) + 1
            per_query.append(time.perf_counter() - t_q)
        where = "GrabCut-masked photos" if masked else "whole photos (no masks)"
        med = statistics.median(per_query)
        status = ", ".join(f"{s} {n}" for s, n in sorted(statuses.items(), key=lambda kv: -kv[1]))
        main = name == "sift"
        rows.append({"benchmark": f"{name} match + verify a {k}-candidate shortlist, {where}",
                     "value": med, "unit": "s", "goal": "< 1 s" if main else "",
                     "note": f"median over {len(queries)} queries (max {max(per_query):.2f} s), keypoints in memory, "
                             f"{settings.verify_model} (USAC MAGSAC++, {settings.verify_threshold:g} px); every "
                             f"candidate matched (opposite flanks too): an upper bound; {np.mean(tentative):.0f} "
                             f"tentative matches and {np.mean(inliers):.1f} inliers per pair on average; {status}"})
        rows.append({"benchmark": f"{name} match + verify one pair, {where}",
                     "value": _ms(float(np.median(per_pair))), "unit": "ms",
                     "note": f"median of {len(per_pair)} pairs; mean {_ms(float(np.mean(per_pair))):.1f} ms, "
                             f"p90 {_ms(float(np.percentile(per_pair, 90))):.1f} ms"})
    return rows


def _lnbnn_rows(sample, feats) -> list[dict]:
    """Row 3: LNBNN's descriptor index over a gallery of N masked photos and the per-query vote."""
    import faiss

    from core.identify.spots.lnbnn import (
        DEFAULT_K,
        EXACT_UP_TO,
        build_descriptor_index,
        lnbnn_scores,
    )

    real = feats[("sift", True)]
    n = max(GALLERY, 1)
    owner = [i % len(real) for i in range(n)]  # gallery position -> sample photo
    gallery = [real[i] for i in owner]
    tiled = n > len(real)
    queries = _queries(sample, QUERIES)
    rows: list[dict] = []
    builds = []
    while len(builds) < 3:  # median of 3 when quick; once when it is not (IVF's k-means)
        t0 = time.perf_counter()
        index = build_descriptor_index(gallery)
        builds.append(time.perf_counter() - t0)
        if builds[0] > 2.0:
            break
    total = int(index.index.ntotal)
    exact = total <= EXACT_UP_TO
    kind = ("exact (flat L2)" if exact else
            f"IVF (approximate: above {EXACT_UP_TO:,} descriptors, k-means lists trained first)")
    if not tiled:
        what = f"{n} masked nyala photos"
    elif exact:
        what = (f"the {len(real)} masked sample photos' real keypoints repeated to {n} photos (a flat index costs "
                "the same whatever the descriptors hold)")
    else:
        what = (f"the {len(real)} masked sample photos' real keypoints repeated to {n} photos (the k-means and "
                "list sizes see repeated descriptors: an estimate)")
    rows.append({"benchmark": f"LNBNN descriptor index build, gallery of {n} masked photos",
                 "value": _ms(statistics.median(builds)), "unit": "ms",
                 "note": f"{'median of 3' if len(builds) == 3 else 'one build'}; {total:,} sift descriptors "
                         f"({total / n:.0f} per photo; photos with an empty mask use the whole photo), {kind}; "
                         f"{what}"})

    def per_query(idx, n_gallery_owner) -> list[float]:
        lnbnn_scores(idx, real[queries[0]], k=DEFAULT_K)  # warm-up
        times = []
        for q in queries:
            same_sighting = {i for i, r in enumerate(sample) if r.get("sighting") and
                             r["sighting"] == sample[q].get("sighting")} | {q}
            exclude = [p for p, i in enumerate(n_gallery_owner) if i in same_sighting]
            t0 = time.perf_counter()
            lnbnn_scores(idx, real[q], k=DEFAULT_K, exclude=exclude)
            times.append(time.perf_counter() - t0)
        return times

    times = per_query(index, owner)
    small = build_descriptor_index(real)
    times_small = per_query(small, list(range(len(real))))
    kq = np.mean([real[q].n for q in queries])
    rows.append({"benchmark": f"LNBNN scores per query, gallery of {n} masked photos",
                 "value": _ms(statistics.median(times)), "unit": "ms",
                 "note": f"median over {len(queries)} queries (max {_ms(max(times)):.0f} ms), k={DEFAULT_K}, "
                         f"{kq:.0f} query keypoints on average, own photo and sighting excluded; the whole gallery is "
                         f"indexed (the app indexes only the query's flank side, about half); {len(real)} real "
                         f"photos alone: {_ms(statistics.median(times_small)):.1f} ms; FAISS threads "
                         f"{faiss.omp_get_max_threads()}"})
    return rows


def _full_evaluation_rows(folder: Path, n_photos: int) -> list[dict]:
    """Row 4: the whole fused evaluation on nyala, when asked for and possible."""
    name = "full fused evaluation of nyala (sift pipeline, efficientnet_lite0 shortlist)"
    full_set = folder == NYALA and n_photos >= FULL_NYALA_MIN
    if os.environ.get(FULL_ENV) != "1":
        why = "" if full_set else f"; it also needs the full nyala set at {NYALA} (only {n_photos} photos here)"
        return [{"benchmark": name, "value": "skipped", "unit": "",
                 "note": f"takes about 10 minutes (GrabCut masks for ~700 photos, then the evaluation); "
                         f"run it with: {RUN_FULL}{why}"}]
    if not full_set:
        return [{"benchmark": name, "value": "skipped", "unit": "",
                 "note": f"{FULL_ENV}=1 is set but the full nyala set is missing: {NYALA}/manifest.csv with at least "
                         f"{FULL_NYALA_MIN} photos is needed (found {n_photos}); point ROSETTE_BENCH_NYALA at it"}]

    from core.identify.backbones import DEFAULT_BACKBONE
    from core.identify.spots.pipeline import PipelineSettings
    from db.identify.benchmarks import create_benchmark, load_benchmark
    from db.inspect.masks import mask_images
    from db.session import open_catalogue
    from db.identify.spots import calibration_image_ids, evaluate_pipeline

    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="rosette-bench-spots-") as tmp:
        cat = open_catalogue(Path(tmp) / "data")
        try:
            t0 = time.perf_counter()
            create_benchmark(cat, "nyala", manifest=folder / "manifest.csv", split="identity", test_fraction=0.3,
                             seed=0, user="bench")
            t_import = time.perf_counter() - t0
            test = load_benchmark(cat, "nyala", split="test")
            # the calibration sample may grow to the whole train split (500 same-animal pairs per scorer)
            need = sorted(set(test.image_ids) | set(calibration_image_ids(cat, "nyala", limit=10 ** 9)))
            t0 = time.perf_counter()
            masked = mask_images(cat, masker="grabcut", image_ids=need, only_missing=True, user="bench")
            t_mask = time.perf_counter() - t0
            settings = PipelineSettings(matcher="sift", lnbnn=True)
            t0 = time.perf_counter()
            res = evaluate_pipeline(cat, global_model=DEFAULT_BACKBONE, benchmark="nyala", settings=settings)
            t_eval = time.perf_counter() - t0
        finally:
            cat.close()
    secs = res.get("seconds", {})
    spots = res.get("spots", {})
    rows.append({"benchmark": "full evaluation: import + benchmark create (identity split, 0.3 test, seed 0)",
                 "value": t_import, "unit": "s", "note": f"{n_photos} photos"})
    rows.append({"benchmark": "full evaluation: GrabCut masks of the photos it needs", "value": t_mask, "unit": "s",
                 "note": f"{masked['summary']}; {len(need)} photos needed: {len(test.image_ids)} test, the rest "
                         "calibration (train split)"})
    rows.append({"benchmark": "full evaluation: evaluate_pipeline (sift, verification on the global top-50, LNBNN)",
                 "value": t_eval, "unit": "s",
                 "note": f"calibration {secs.get('calibration')} s, test {secs.get('test')} s (its own timing); "
                         f"{spots.get('verified_pairs', '?')} test pairs verified; pipeline {res.get('model')}"})
    comps = res.get("components", {})
    glob = comps.get("global", {})

    def f(x) -> str:
        return "-" if x is None else f"{x:.3f}"

    for metric, get in (("mAP (macro)", lambda d: d.get("map_macro")),
                        ("CMC@1 (macro)", lambda d: (d.get("cmc_macro") or {}).get("1"))):
        val = get(res)
        g = get(glob)
        others = ", ".join(f"{c} {f(get(d))}" for c, d in comps.items() if c != "global")
        rows.append({"benchmark": f"full evaluation: {metric}, pipeline vs global alone",
                     "value": "-" if val is None else float(val), "unit": "",
                     "note": f"global alone {f(g)} ({'+' if (val or 0) >= (g or 0) else ''}"
                             f"{(val or 0) - (g or 0):.3f}); components: {others}; "
                             f"{res.get('n_queries', '?')} test queries"})
    fusion = res.get("fusion") or {}
    sample = res.get("calibration_sample") or {}
    for name, cv in (fusion.get("cv") or {}).items():
        test_fig = (fusion.get("test") or {}).get(name, {})
        rows.append({"benchmark": f"full evaluation: fusion {name}{' (kept)' if name == fusion.get('kept') else ''}",
                     "value": float(test_fig.get("map_macro", float("nan"))), "unit": "test mAP (macro)",
                     "note": f"test CMC@1 {f(test_fig.get('cmc1_macro'))}; cross-validated on the calibration "
                             f"photos ({fusion.get('n_folds')} folds of whole individuals): mAP "
                             f"{f(cv.get('map_macro'))}, CMC@1 {f(cv.get('cmc1_macro'))}"})
    if fusion:
        rows.append({"benchmark": "full evaluation: fusion kept", "value": str(fusion.get("kept")), "unit": "",
                     "note": f"{fusion.get('why')}; calibration sample: {sample.get('words')}"})
    return rows


def run() -> list[dict]:
    import cv2

    from core.identify.features import load_rgb
    from core.inspect.masking import create_masker
    from core.identify.spots import create_matcher

    folder, all_rows, note_data = _source()
    sample = _sample(all_rows, SAMPLE)
    t0 = time.perf_counter()
    photos = [load_rgb(folder / "images" / r["filename"]) for r in sample]
    t_decode = (time.perf_counter() - t0) / len(photos)
    grabcut = create_masker("grabcut")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="bench-grabcut") as pool:
        masks = list(pool.map(lambda p: grabcut.predict(p).mask, photos))
    t_mask = time.perf_counter() - t0
    area = float(np.mean([m.mean() for m in masks]))
    sift, orb = create_matcher("sift"), create_matcher("orb")
    data = (f"{len(sample)} photos of {len({r['identity'] for r in sample})} animals from {note_data}; "
            f"JPEG decode {_ms(t_decode):.0f} ms/photo")

    rows, feats = _extraction_rows(photos, masks, sift, orb, note_data=data, t_mask=t_mask, area=area)
    rows += _sift_variant_rows(photos, masks, note_data=data)
    with tempfile.TemporaryDirectory(prefix="rosette-bench-spots-cache-") as cache:
        rows += _verify_rows(sample, feats, sift, orb, Path(cache))
    rows += _lnbnn_rows(sample, feats)
    rows += _full_evaluation_rows(folder, len(all_rows))

    load = os.getloadavg()[0]
    for row in rows:  # timings on a shared machine are only meaningful next to its load
        row["note"] = (row.get("note", "") + f"; load avg {load:.1f} on {os.cpu_count()} cores, "
                       f"OpenCV threads {cv2.getNumThreads()}").lstrip("; ")
    return rows


if __name__ == "__main__":
    for r in run():
        print(r)
