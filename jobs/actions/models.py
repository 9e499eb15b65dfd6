"""What the Models tab shows and does: leaderboard HTML, compare, promote / archive, calibration diagram,
retraining from new decisions. Domain queries live in db/ (leaderboard, compare, species, calibration)."""

from __future__ import annotations

import html
from typing import Any

from db.session import Catalogue


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _f(v: Any, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def benchmark_names(cat: Catalogue) -> list[str]:
    from db.benchmarks import list_benchmarks

    with cat.unit_of_work() as s:
        return [b.name for b in list_benchmarks(s)]


def model_names(cat: Catalogue, *, include_archived: bool = False) -> list[str]:
    from db.species import model_status

    return [n for n, st in sorted(model_status(cat).items()) if include_archived or st["status"] != "archived"]


def leaderboard_html(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ("<div class='empty' id='models-empty'>No evaluation on this benchmark and variant yet: evaluate a "
                "model (Benchmarks tab, or <code>rosette eval</code>) or train one (Jobs tab).</div>")
    head = ("Model", "Status", "Head / loss", "mAP macro", "mAP micro", "CMC@1", "CMC@5", "Cross/within flank",
            "BG/FG (risk)", "Mirror (tier)", "Trained", "Photos trained on")
    body = []
    for r in rows:
        from core.diagnostics import tier_colour

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
            f"<td>{_f(r['cmc5_macro'])}</td><td>{_f(r['cross_within'])}</td>"
            f"<td>{_f(r['bg_fg'])} {_e(r['bg_fg_band'] or '')}</td><td>{mirror}</td><td>{trained}</td>"
            f"<td>{r['snapshot_images'] if r['snapshot_images'] is not None else '–'}</td></tr>")
    th = "".join(f"<th>{h}</th>" for h in head)
    return (f"<table id='models-table'><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            "<div class='note'>Hover a model's name for its provenance (architecture, weights and their hash, "
            "preprocessing, score, masker and inpainter of the diagnostics).</div>")


def compare_models(cat: Catalogue, a: str | None, b: str | None, benchmark: str | None) -> tuple[str, Any]:
    from db.compare import compare, difference_figure

    if not (a and b and benchmark):
        raise ValueError("Choose two models and a benchmark.")
    res = compare(cat, a, b, benchmark=benchmark)
    lines = [f"**{e['verdict']}**" if ep == "cmc1" else e["verdict"] for ep, e in res["endpoints"].items()]
    table = "\n".join(
        f"| {ep} | {e['mean_a']:.4f} ({e['macro_a']:.4f}) | {e['mean_b']:.4f} ({e['macro_b']:.4f}) | "
        f"{100 * e['mean_diff']:+.2f} [{100 * e['ci_low']:+.2f}, {100 * e['ci_high']:+.2f}] | {e['p_holm']:.3g} |"
        for ep, e in res["endpoints"].items())
    text = ("\n\n".join(lines) + f"\n\n| endpoint | {a} | {b} | A−B points [95% CI] | p (Holm) |\n|---|---|---|---|---|\n"
            + table + f"\n\n{res['endpoints']['map']['n_queries']} queries of {benchmark}; paired Wilcoxon per "
            "seed, Fisher across seeds, Holm across the three endpoints. Means are per query (what the tests "
            "compare); in brackets, balanced per individual, as the leaderboard shows them.")
    return text, difference_figure(res)


def promote(cat: Catalogue, name: str | None, species: str | None, *, user: str) -> str:
    from jobs.actions.promote import promote as promote_and_queue

    if not name:
        raise ValueError("Choose a model to promote.")
    res = promote_and_queue(cat, name, species=species or None, user=user)
    return (f"{res['model']} is now the active model for {res['species']} (was {res['previous']}). Its features "
            f"are being computed for every photo (job #{res['job_id']}); match review switches to it when done.")


def archive(cat: Catalogue, name: str | None) -> str:
    from db.species import archive_model

    if not name:
        raise ValueError("Choose a model to archive.")
    archive_model(cat, name)
    return f"{name} archived: hidden from the pickers, kept with its evaluations."


def species_names(cat: Catalogue) -> list[str]:
    from db.species import list_species

    return [r["name"] for r in list_species(cat)]


def calibration_view(cat: Catalogue, model: str | None, species: str | None) -> tuple[str, Any]:
    """(text, plotly reliability figure) of a model's calibration for a species."""
    import plotly.graph_objects as go

    from db.calibration import calibration_report
    from db.species import find_species

    if not model:
        raise ValueError("Choose a model.")
    with cat.unit_of_work() as s:
        sid = find_species(s, species or 1).id
    rep = calibration_report(cat, model, species_id=sid)
    fig = go.Figure()
    if rep is None:
        return (f"{model} cannot be calibrated yet: it needs a few same / not-the-same decisions with both outcomes "
                "among them (or a benchmark, or two identified individuals of this species).", fig)
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


def retrain_status(cat: Catalogue, species: str | None) -> str:
    from db.species import find_species
    from db.training import decisions_since_active
    from jobs.queue import list_jobs

    with cat.unit_of_work() as s:
        sid = find_species(s, species or 1).id
    d = decisions_since_active(cat, sid)
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


def retrain(cat: Catalogue, species: str | None, *, user: str) -> str:
    from db.species import find_species
    from jobs.kinds import retrain_params
    from jobs.queue import submit

    with cat.unit_of_work() as s:
        sid = find_species(s, species or 1).id
    params = retrain_params(cat, species_id=sid, user=user)
    job_id = submit(cat, "train", params)
    return (f"Retraining queued as job #{job_id}: train on the confirmed individuals, evaluate"
            + (f" on {params['benchmark']}" if params.get("benchmark") else "")
            + f", diagnose and compare with {params['compare_with']}. Promotion stays your decision.")
