"""``rosette diagnose --backbone NAME --benchmark NAME [--json]``: context, laterality and flank diagnostics;
with ``--sensitivity``, the selective-sensitivity diagnostic (slopes of similarity against background, lighting,
viewpoint and identity edits, and the selectivity)."""

from __future__ import annotations

import json
import sys

from app.console import print_table
from jobs.actions.diagnostics import diagnose, parse_seeds, sensitivity
from jobs.requests.diagnostics import DiagnoseRequest, SensitivityRequest


def register(sub) -> None:
    p = sub.add_parser("diagnose", help="what evidence a model uses: background vs coat, mirror, flanks")
    p.add_argument("--backbone", "--model", dest="backbone", default=None,
                   help="a backbone registry name or a trained model (rosette models list)")
    p.add_argument("--benchmark", required=True)
    p.add_argument("--masker", default=None, help="for test photos without a mask (default: sam2 if configured, else grabcut)")
    p.add_argument("--keep-masks", action="store_true",
                   help="store the masks made for photos without one in the catalogue (default: the diagnostic's "
                        "cache only, so the catalogue's masks are left as the curators made them)")
    p.add_argument("--inpainter", default=None, help="opencv | diffusers (default: diffusers if configured, else opencv)")
    p.add_argument("--seeds", default="0", help="comma-separated inpainting seeds, e.g. 0,1,2")
    p.add_argument("--sensitivity", action="store_true",
                   help="selective sensitivity instead: how far the similarity to the original photo falls per unit "
                        "of background, lighting, viewpoint and identity change, and the selectivity")
    p.add_argument("--seed", type=int, default=0, help="with --sensitivity: seed of the edits and the bootstrap")
    p.add_argument("--mask-missing", action="store_true",
                   help="with --sensitivity: mask test photos without a mask first (into the catalogue, with "
                        "--masker); without it such photos are named and refused")
    p.add_argument("--identity-edit", choices=["coat", "diffusion"], default=None,
                   help="with --sensitivity: another animal's coat blended in, or the animal repainted by the "
                        "diffusers model (default: diffusion if ROSETTE_INPAINT_MODEL is set, else coat)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _fmt(x) -> str:
    return "n/a" if x is None else (f"{x:.4f}" if isinstance(x, float) else str(x))


def _masks_words(run: dict) -> str:
    if not run.get("todo"):
        return "every test photo had a catalogue mask"
    where = "stored in the catalogue" if run.get("kept_in_catalogue") else "kept in the diagnostic's cache only"
    empty = (f", {run['empty']} empty (the masker found no animal, even with a click in the middle: mask those in the "
             "Mask tab)" if run.get("empty") else "")
    return f"{run['masked']} made, {run.get('cached', 0)} reused for photos without one{empty}, {where}"


def _progress(frac: float, msg: str) -> None:
    if sys.stderr.isatty():
        print(f"\r[{frac:4.0%}] {msg:<60}", end="", file=sys.stderr, flush=True)


def _ci(d: dict) -> str:
    return "n/a" if d.get("ci_low") is None else f"[{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]"


def run_sensitivity(args, ctx) -> int:
    request = SensitivityRequest(benchmark=args.benchmark, backbone=args.backbone, seed=args.seed,
                                 mask_missing=args.mask_missing, masker=args.masker, inpainter=args.inpainter,
                                 identity_edit=args.identity_edit, user=ctx.user)
    res = sensitivity(ctx.catalogue, request, progress=_progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if args.json:
        out = {k: v for k, v in res.items() if k not in ("per_image", "model_config", "inpainter_config",
                                                         "per_photo_slopes")}
        print(json.dumps(out))
        return 0
    rows = [(name, f"{d['slope']:+.4f}", _ci(d), _fmt(d["curve"][-1]))
            for name, d in res["dimensions"].items()]
    print_table(rows, ["what changes", "slope of similarity", "95% CI", "similarity at strength 1"])
    lo, hi = res["selectivity_ci"]
    sel = res["selectivity"]
    print(f"selectivity (|identity slope| / steepest context slope, {res['steepest_context']}): "
          f"{'unbounded' if sel is None else f'{sel:.3f}'}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None else ""))
    for line in res["verdicts"]:
        print(line)
    cache = res["cache"]
    if (res.get("masks") or {}).get("made_now"):
        print(f"masks made first: {res['masks']['made_now']}")
    print(f"model {res['model']} (fingerprint {res['model_fingerprint']}), benchmark {res['benchmark']} test split "
          f"({res['n_images']} photos), edit seed {res['edits']['seed']}, identity edit {res['edits']['identity']}, "
          f"backgrounds: {res['inpainter']}; {cache['edited_photos']} edited photos, {cache['cached']} from the "
          f"cache; {res['seconds']:.1f} s; stored as evaluation {res['evaluation_id']}")
    return 0


def run(args, ctx) -> int:
    if args.sensitivity:
        return run_sensitivity(args, ctx)
    request = DiagnoseRequest(benchmark=args.benchmark, backbone=args.backbone, masker=args.masker,
                              inpainter=args.inpainter, seeds=parse_seeds(args.seeds), keep_masks=args.keep_masks,
                              user=ctx.user)
    res = diagnose(ctx.catalogue, request, progress=_progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if args.json:
        out = {k: v for k, v in res.items() if k not in ("per_image", "model_config", "inpainter_config")}
        print(json.dumps(out))
        return 0
    rows = [(f"mAP macro: {v}", _fmt(m)) for v, m in res["map_macro_by_variant"].items()]
    rows += [
        ("BG/FG (inpainted background / foreground)", f"{_fmt(res['bg_fg'])}  {res['bg_fg_band'] or ''}"),
        ("BG+Sil/FG (background with silhouette / foreground)", f"{_fmt(res['bg_sil_fg'])}  {res['bg_sil_fg_band'] or ''}"),
        ("mirror similarity mean / std", f"{_fmt(res['mirror_sim_mean'])} / {_fmt(res['mirror_sim_std'])}"),
        ("mirror tier", res["mirror_tier"]),
        ("photos whose mirror looks more like another animal", res["danger_margin_positive"]),
        ("mirrored-query mAP ratio", _fmt(res["mirrored_query_ratio"])),
    ]
    for name in ("within_flank", "cross_flank"):
        d = res[name]
        rows.append((f"{name.replace('_', '-')} mAP macro / micro, CMC@1 macro",
                     f"{_fmt(d['map_macro'])} / {_fmt(d['map_micro'])}, {_fmt(d['cmc_macro'].get('1'))}"))
    rows.append(("cross/within ratio", _fmt(res["cross_within_ratio"])))
    rows.append(("cross-flank mAP macro with same-sighting photos", _fmt(res["cross_flank_with_same_sighting"]["map_macro"])))
    print_table(rows, ["diagnostic", "value"])
    print(f"model {res['model']}, benchmark {res['benchmark']} test split ({res['n_images']} photos); "
          f"masks: {res['masker']} ({_masks_words(res['mask_run'])}); backgrounds: {res['inpainter']} seeds {res['seeds']}; "
          f"stored as evaluation {res['evaluation_id']}")
    return 0
