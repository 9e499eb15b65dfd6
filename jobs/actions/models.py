"""What the Models tab shows and does: leaderboard HTML, compare, calibration diagram, retraining from new
decisions (promote and archive are in :mod:`jobs.actions.promote`). ``rosette compare``, ``rosette calibration``
and ``rosette retrain`` call the same functions; the actions take a request of ``jobs.requests.models``.
Domain queries live in db/ (leaderboard, compare, species, calibration)."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from core.inspect.diagnostics import tier_colour
from db.identify.calibration import calibration_refusal, calibration_report, new_individual_threshold
from db.identify.compare import compare as compare_on_benchmark
from db.identify.compare import difference_figure  # noqa: F401  (the Models tab's per-query differences)
from db.field.identities import new_animal_report
from db.inspect.leaderboard import SORT_KEYS, leaderboard  # noqa: F401  (SORT_KEYS: the tab's sort choices)
from db.session import Catalogue
from db.species import find_species, model_status
from jobs.actions.benchmarks import benchmark_names  # noqa: F401  (the Models tab's benchmark picker)
from jobs.actions.common import curator_name
from jobs.kinds import retrain_params
from jobs.queue import list_jobs, submit
from jobs.requests.models import CompareRequest, RetrainRequest  # noqa: F401


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _f(v: Any, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def species_id(cat: Catalogue, species: str | int | None) -> int:
    """The id of a species named or numbered ``species`` (None or "": the default species)."""
    with cat.unit_of_work() as s:
        return find_species(s, species if species not in (None, "") else 1).id


def model_names(cat: Catalogue, *, include_archived: bool = False) -> list[str]:
    return [n for n, st in sorted(model_status(cat).items()) if include_archived or st["status"] != "archived"]


def leaderboard_rows(cat: Catalogue, *, benchmark: str, variant: str = "full_rgb", sort: str = "map_macro",
                     include_archived: bool = False) -> list[dict[str, Any]]:
    """Every model's latest evaluation on ``benchmark`` (and ``variant``), sorted, with its diagnostics."""
    return leaderboard(cat, benchmark=benchmark, variant=variant, sort=sort, include_archived=include_archived)


def leaderboard_html(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ("<div class='empty' id='models-empty'>No evaluation on this benchmark and variant yet: evaluate a "
                "model (Benchmarks tab, or <code>rosette eval</code>) or train one (Jobs tab).</div>")
    head = ("Model", "Status", "Head / loss", "mAP macro", "mAP micro", "CMC@1", "CMC@5", "Same-flank mAP",
            "Cross-flank mAP", "Cross/within flank",
            "BG/FG (risk)", "Mirror (tier)", "Selectivity", "Trained", "Photos trained on")
    body = []
    for r in rows:
        status = r["status"] + (f" for {', '.join(r['active_for'])}" if r["active_for"] else "")
        mirror = "–"
        if r["mirror_sim"] is not None:
            mirror = (f"<span class='tier' style='background:{tier_colour(r['mirror_sim'])}' "
                      f"title='mirror similarity tier'>{r['mirror_sim']:.2f} ({_e(r['mirror_tier'])})</span>")
        trained = "–" if r["train_seconds"] is None else f"{r['train_seconds']:.0f} s on {_e(r['device'])}"
        body.append(
            f"<tr data-model='{_e(r['name'])}' data-status='{_e(r['status'])}'>"
            f"<td title='{_e(r['provenance'])}' class='prov'>{_e(r['name'])}</td><td>{_e(status)}</td>"
            f"<td>{_e(r['head'] or 'frozen features')}{' / ' + _e(r['loss']) if r['loss'] else ''}</td>"
            f"<td>{_f(r['map_macro'])}</td><td>{_f(r['map_micro'])}</td><td>{_f(r['cmc1_macro'])}</td>"
            f"<td>{_f(r['cmc5_macro'])}</td>"
            f"<td class='flank-same' title='rosette eval --flank same: each query ranks only its own flank'>"
            f"{_f(r.get('map_same_flank'))}</td>"
            f"<td class='flank-cross' title='rosette eval --flank cross: each query ranks only the other flank'>"
            f"{_f(r.get('map_cross_flank'))}</td><td>{_f(r['cross_within'])}</td>"
            f"<td>{_f(r['bg_fg'])} {_e(r['bg_fg_band'] or '')}</td><td>{mirror}</td>"
            f"<td class='selectivity' title='selective sensitivity: |identity slope| / steepest context slope "
            f"(run #{r.get('sensitivity_id') or '–'}); above 1, another animal&#39;s coat moves the model more than "
            f"background, lighting or viewpoint'>{_f(r.get('selectivity'), 2)}</td><td>{trained}</td>"
            f"<td>{r['snapshot_images'] if r['snapshot_images'] is not None else '–'}</td></tr>")
    th = "".join(f"<th>{h}</th>" for h in head)
    return (f"<table id='models-table'><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            "<div class='note'>Hover a model's name for its provenance (architecture, weights and their hash, "
            "preprocessing, score, masker and inpainter of the diagnostics).</div>")


def compare(cat: Catalogue, request: CompareRequest) -> dict[str, Any]:
    """Paired statistics between A and B on the benchmark's test split: per endpoint (mAP, CMC@1, CMC@5) the
    effect with its bootstrap interval, the Wilcoxon (per seed) / Fisher (across seeds) p-value, Holm-corrected
    across the endpoints, and a verdict in words."""
    a = request.a[0] if len(request.a) == 1 else list(request.a)
    b = request.b[0] if len(request.b) == 1 else list(request.b)
    return compare_on_benchmark(cat, a, b, benchmark=request.benchmark, alpha=request.alpha)


def compare_markdown(res: dict[str, Any]) -> str:
    """A comparison (:func:`compare`) as the Models tab shows it: the verdicts, then a table per endpoint."""
    a, b, benchmark = res["a"], res["b"], res["benchmark"]
    lines = [f"**{e['verdict']}**" if ep == "cmc1" else e["verdict"] for ep, e in res["endpoints"].items()]
    table = "\n".join(
        f"| {ep} | {e['mean_a']:.4f} ({e['macro_a']:.4f}) | {e['mean_b']:.4f} ({e['macro_b']:.4f}) | "
        f"{100 * e['mean_diff']:+.2f} [{100 * e['ci_low']:+.2f}, {100 * e['ci_high']:+.2f}] | {e['p_holm']:.3g} |"
        for ep, e in res["endpoints"].items())
    text = ("\n\n".join(lines) + f"\n\n| endpoint | {a} | {b} | A−B points [95% CI] | p (Holm) |\n|---|---|---|---|---|\n"
            + table + f"\n\n{res['endpoints']['map']['n_queries']} queries of {benchmark}; paired Wilcoxon per "
            "seed, Fisher across seeds, Holm across the three endpoints. Means are per query (what the tests "
            "compare); in brackets, balanced per individual, as the leaderboard shows them.")
    return text


def calibration(cat: Catalogue, model: str, species: str | int | None = None) -> dict[str, Any]:
    """How ``model``'s scores read as "probability this is the same animal" for a species (``ValueError`` with
    the real cause when it has none yet), with the species' new-individual threshold and how well p(new), the probability that a query's
    animal is not in the catalogue, is calibrated (``new_animal``: its cross-fitted ECE; ``rosette calibration``)."""
    sid = species_id(cat, species)
    rep = calibration_report(cat, model, species_id=sid)
    if rep is None:
        raise ValueError(calibration_refusal(cat, model, species_id=sid) or f"{model} has no calibration yet")
    rep["new_individual_threshold"] = new_individual_threshold(cat, sid)
    rep["new_animal"] = new_animal_report(cat, model, species_id=sid)
    return rep


def calibration_view(cat: Catalogue, model: str | None, species: str | None) -> tuple[str, Any]:
    """(text, plotly reliability figure) of a model's calibration for a species."""
    import plotly.graph_objects as go  # lazy: plotly is only needed to draw the diagram

    if not model:
        raise ValueError("Choose a model.")
    rep = calibration_report(cat, model, species_id=species_id(cat, species))
    fig = go.Figure()
    if rep is None:  # the real cause, in the words the Population tab and the command line give
        sid = species_id(cat, species)
        return (calibration_refusal(cat, model, species_id=sid) or f"{model} has no calibration yet.", fig)
    fig.add_trace(go.Scatter(x=rep["curve"]["score"], y=rep["curve"]["probability"], mode="lines",
                             name=f"score → probability ({rep['method']}, top candidate)"))
    rel = rep["reliability_on_decisions"]
    if rel and rel["bins"]:
        fig.add_trace(go.Scatter(x=[b["predicted"] for b in rel["bins"]], y=[b["observed"] for b in rel["bins"]],
                                 mode="markers", name="decisions: observed vs predicted",
                                 marker={"size": [6 + min(20, b["n"]) for b in rel["bins"]]}, xaxis="x2", yaxis="y"))
    fig.update_layout(height=320, margin={"l": 50, "r": 20, "t": 30, "b": 40}, xaxis_title="raw score",
                      yaxis_title="probability same animal", yaxis_range=[0, 1],
                      legend={"orientation": "h", "y": -0.3})
    sources = ", ".join(f"{n} {what}" for what, n in rep["sources"].items())
    ece = f"; expected calibration error on the decisions {rel['ece']:.3f}" if rel else ""
    return (f"**{model}**: calibrated by {rep['method']} on {rep['n_outcomes']} outcomes ({sources}), "
            f"{rep['n_positive']} of them the same animal{ece}.", fig)


def _since_active(cat: Catalogue, sid: int) -> dict[str, Any]:
    from db.identify.training import decisions_since_active  # lazy: db.identify.training imports torch (seconds)

    return decisions_since_active(cat, sid)


def retrain_status(cat: Catalogue, species: str | None) -> str:
    d = _since_active(cat, species_id(cat, species))
    since = f"since it was trained ({d['since'][:16].replace('T', ' ')} UTC)" if d["since"] else "in all"
    text = f"**{d['confirmed']}** confirmed identities {since} for the active model **{d['active_model']}**."
    last = next((j for j in list_jobs(cat, limit=50, kind="train")
                 if (j.params or {}).get("reason") == "retrain from new decisions"), None)
    if last is not None:
        r = last.result or {}
        verdict = (r.get("comparison") or {}).get("verdict")
        text += (f"\n\nLast retraining: job #{last.id} {last.status.value}"
                 + (f", new candidate **{r['model']}**. {verdict or ''} Promote it below if you trust it."
                    if r.get("model") else f": {last.message or ''}"))
    return text


@dataclass
class RetrainOutcome:
    job_id: int
    confirmed_since_active: int  # identities confirmed since the active model was trained
    active_model: str
    message: str


def retrain(cat: Catalogue, request: RetrainRequest) -> RetrainOutcome:
    """Queue the training job that learns from the decisions made since the species' active model (refused when
    none was confirmed since, unless ``force``): train with the identity-aware sampler, the curators' "not the
    same" decisions its hard negatives, evaluate, diagnose, compare with the active model. Promotion stays the
    curator's decision."""
    sid = species_id(cat, request.species)
    d = _since_active(cat, sid)
    params = retrain_params(cat, species_id=sid, user=curator_name(request.user), force=request.force)
    job_id = submit(cat, "train", params)
    return RetrainOutcome(job_id, d["confirmed"], d["active_model"], (
        f"Retraining queued as job #{job_id}: train on the confirmed individuals with identity-aware batches "
        "(the pairs you marked \"not the same\" are the hard negatives), evaluate"
        + (f" on {params['benchmark']}" if params.get("benchmark") else "")
        + f", diagnose and compare with {params['compare_with']}. Promotion stays your decision."))
