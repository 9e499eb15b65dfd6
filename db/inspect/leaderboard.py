"""The models leaderboard of one benchmark and variant: every model's latest retrieval evaluation joined with
its latest diagnostics, its latest selective-sensitivity run (``selectivity``, None when there is none) and its
training facts (what the Models tab shows, with provenance). The headline figures are of evaluations over every
flank; ``map_same_flank`` / ``map_cross_flank`` are the latest ``rosette eval --flank same`` / ``cross``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from db.models import Evaluation, Model
from db.inspect.sensitivity import SENSITIVITY_KIND
from db.session import Catalogue
from db.species import model_status

SORT_KEYS = ("map_macro", "map_micro", "cmc1_macro", "cmc5_macro", "map_same_flank", "map_cross_flank",
             "cross_within", "bg_fg", "mirror_sim", "selectivity", "train_seconds", "name")


def leaderboard(cat: Catalogue, *, benchmark: str, variant: str = "full_rgb", sort: str = "map_macro",
                include_archived: bool = False) -> list[dict[str, Any]]:

    if sort not in SORT_KEYS:
        raise ValueError(f"unknown sort key {sort!r}; expected one of {', '.join(SORT_KEYS)}")
    status = model_status(cat)
    with cat.unit_of_work() as s:
        evals = list(s.scalars(select(Evaluation).where(Evaluation.benchmark_name == benchmark)
                               .order_by(Evaluation.id)))
        models = {m.name: m for m in s.scalars(select(Model))}
    plain = [e for e in evals if e.kind == "retrieval" and e.variant == variant
             and (e.metrics or {}).get("rerank", "none") in ("none", None)]
    # the headline: every flank; same- / cross-flank columns: the latest `rosette eval --flank same|cross`
    retrieval = {e.model_name: e for e in plain if (e.metrics or {}).get("flank", "any") in ("any", None)}
    by_flank = {f: {e.model_name: e for e in plain if (e.metrics or {}).get("flank") == f} for f in ("same", "cross")}
    diagnose = {e.model_name: e for e in evals if e.kind == "diagnose"}
    sensitivity = {e.model_name: e for e in evals if e.kind == SENSITIVITY_KIND}
    rows = []
    for name in sorted(set(retrieval) | set(diagnose) | set(sensitivity) | set(by_flank["same"])
                       | set(by_flank["cross"])):
        m = models.get(name)
        st = status.get(name, {"status": "candidate", "active_for": []})
        if st["status"] == "archived" and not include_archived:
            continue
        ev, dg, sn = retrieval.get(name), diagnose.get(name), sensitivity.get(name)
        met = ev.metrics if ev else {}
        dm = dg.metrics if dg else {}
        tc = (m.training_config or {}) if m else {}
        cross, within = (dm.get("cross_flank") or {}), (dm.get("within_flank") or {})
        rows.append({
            "name": name, "status": st["status"], "active_for": st["active_for"],
            "head": m.head if m else None, "loss": m.loss if m else None,
            "kind": "pipeline" if m is not None and m.head == "pipeline" else "model",
            "map_macro": met.get("map_macro"), "map_micro": met.get("map_micro"),
            "cmc1_macro": (met.get("cmc_macro") or {}).get("1"), "cmc5_macro": (met.get("cmc_macro") or {}).get("5"),
            "n_queries": met.get("n_queries"),
            "map_same_flank": _flank_map(by_flank["same"].get(name)),
            "map_cross_flank": _flank_map(by_flank["cross"].get(name)),
            "flank_evaluation_ids": {f: by_flank[f][name].id for f in ("same", "cross") if name in by_flank[f]},
            "cross_flank_map": cross.get("map_macro"), "within_flank_map": within.get("map_macro"),
            "cross_within": dm.get("cross_within_ratio"),
            "bg_fg": dm.get("bg_fg"), "bg_fg_band": dm.get("bg_fg_band"),
            "mirror_sim": dm.get("mirror_sim_mean"), "mirror_tier": dm.get("mirror_tier"),
            "selectivity": (sn.metrics or {}).get("selectivity") if sn else None,
            "selectivity_ci": (sn.metrics or {}).get("selectivity_ci") if sn else None,
            "sensitivity_id": sn.id if sn else None,
            "train_seconds": tc.get("wall_seconds"), "device": (tc.get("runtime") or {}).get("device"),
            "snapshot_images": (m.data_snapshot or {}).get("n_images") if m else None,
            "snapshot_hash": (m.data_snapshot or {}).get("hash") if m else None,
            "evaluation_id": ev.id if ev else None, "diagnose_id": dg.id if dg else None,
            "provenance": config_provenance(ev.model_config if ev else (m.config if m else {}), dg),
        })
    def key(r: dict[str, Any]) -> Any:
        v = r[sort]
        if sort == "name":
            return (0, v)
        return (v is None, -(v if v is not None else 0.0))
    rows.sort(key=key)
    return rows


def _flank_map(ev: Evaluation | None) -> float | None:
    return None if ev is None else (ev.metrics or {}).get("map_macro")


def config_provenance(cfg: dict[str, Any], dg: Evaluation | None = None) -> str:
    """One line: which model, weights and preprocessing (for a fused pipeline: its global model, matcher,
    shortlist and calibration) produced an evaluation's numbers."""
    cfg = cfg or {}
    if cfg.get("pipeline"):  # a fused pipeline (db.identify.spots): its global model, matcher, shortlist and calibration
        st, mt, gc = cfg.get("settings") or {}, cfg.get("matcher") or {}, cfg.get("global_config") or {}
        cal = ", ".join(f"{k} on {v.get('n_outcomes')} pairs" for k, v in (cfg.get("calibration") or {}).items())
        return (f"{cfg['pipeline']}: global model {config_provenance(gc)} | top-{st.get('shortlist')} shortlist "
                f"re-ranked by {mt.get('name')} spots (max side {mt.get('max_side')}, {mt.get('max_keypoints')} "
                f"keypoints, ratio {mt.get('ratio')}, config {mt.get('fingerprint')}), {st.get('verify_model')} "
                f"verification{', LNBNN k=' + str(st.get('lnbnn_k')) if st.get('lnbnn') else ''} | score: mean "
                f"isotonic-calibrated probability ({cal})")
    bits = [f"{cfg.get('name', '?')}: {cfg.get('architecture', '?')}", f"weights {cfg.get('weight_source', '?')}",
            f"sha256 {str(cfg.get('weights_sha256') or '-')[:12]}", f"input {cfg.get('input_size')}",
            f"mean {cfg.get('mean')} std {cfg.get('std')}", f"pooling {cfg.get('pooling')}",
            f"score {cfg.get('metric', 'cosine')}", f"fingerprint {cfg.get('fingerprint', '-')}"]
    if dg is not None:
        bits.append(f"diagnostics: masker {dg.masker}, inpainter {dg.inpainter}")
    return "; ".join(bits)
