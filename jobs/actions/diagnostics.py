"""What the Diagnostics tab shows and does for a model on a benchmark: run the diagnostics (:func:`diagnose`, for
``rosette diagnose``) or queue them (:func:`submit_diagnose`, the tab's button; the ``diagnose`` job runs the same
request), freeze a benchmark from the catalogue, and read a stored run back (:func:`load_diagnosis`) with its
verdicts, charts and flank table. The selective-sensitivity diagnostic runs the same ways (:func:`sensitivity`,
:func:`submit_sensitivity`) and is read back with :func:`load_sensitivity`: its curves, slopes table and verdict.
The single-photo panel is :mod:`jobs.actions.photo_diagnosis`; the words both tabs share are
:mod:`jobs.actions.diagnostic_words`.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from core.identify.backbones import DEFAULT_BACKBONE, list_backbones, weights_available
from core.inspect.diagnostics import TIER_BANDS  # one definition of the tier bands and colours
from core.inspect.sensitivity import DIMENSION_WORDS, DIMENSIONS
from core.inspect.sensitivity_stats import sensitivity_figure
from core.inspect.variants import VARIANTS
from db.identify.benchmarks import create_benchmark, list_benchmarks, load_benchmark
from db.inspect.diagnostics import run_diagnose
from db.inspect.masks import empty_automatic_masks
from db.identify.evaluation import list_evaluations
from db.models import Evaluation, JobStatus
from db.inspect.sensitivity import (
    SENSITIVITY_KIND,
    MissingMasksError,
    identity_edit_in_use,
    run_sensitivity,
    unusable_masks,
)
from db.session import Catalogue
from db.species import active_model_name
from jobs import queue
from jobs.actions.common import curator_name
from jobs.actions.diagnostic_words import VARIANT_WORDS, fmt, masker_in_use, tip, weights_label
from jobs.requests.benchmarks import CreateBenchmarkRequest
from jobs.requests.diagnostics import DiagnoseRequest, SensitivityRequest

#: What a mirror tier means, in words.
TIER_WORDS: dict[str, str] = {
    "aware": "tells an animal from its mirror image (left and right flanks look different to it)",
    "moderate": "partly tells an animal from its mirror image",
    "strong shortcut": "hardly tells an animal from its mirror image (left and right flanks look alike to it)",
    "symmetric": "cannot tell an animal from its mirror image at all",
}
BAND_WORDS: dict[str, str] = {
    "LOW": "low risk: the animal's coat carries more of the identification than the background",
    "MEDIUM": "medium risk: the background alone identifies animals about as well as the coat",
    "HIGH": "high risk: the background alone identifies animals better than the coat",
}
FLANK_HEADERS = ["Comparison", "Average precision per animal", "Average precision per photo",
                 "Right first", "Right in top 5", "Right in top 10", "Photos asked"]


def backbone_names(cat: Catalogue | None = None) -> list[str]:
    """Models offered in the UI: the offline default first, then trained models of ``cat``, then the rest."""
    names = sorted((n for n in list_backbones() if not n.endswith(":") and weights_available(n)),
                   key=lambda n: (n != DEFAULT_BACKBONE, n))
    if cat is None:
        return names
    from db.identify.training import trained_model_names  # lazy: db.identify.training imports torch

    ordered = names[:1] + trained_model_names(cat) + names[1:]
    active = active_model_name(cat)  # the active model first: the default pick
    return [active] + [n for n in ordered if n != active]


def benchmark_names(cat: Catalogue) -> list[str]:
    with cat.unit_of_work() as s:
        return [b.name for b in list_benchmarks(s)]


def create_catalogue_benchmark(cat: Catalogue, request: CreateBenchmarkRequest) -> str:
    """Freeze every photo assigned to an individual into a named benchmark (seeded split)."""
    bench = create_benchmark(cat, request.name, split=request.split, test_fraction=request.test_fraction,
                             seed=request.seed, user=curator_name(request.user))
    cfg = bench.config
    return (f"Benchmark {bench.name} frozen: {cfg['n_images']} photos of {cfg['n_identities']} individuals, "
            f"{cfg['n_test']} photos of {cfg['n_test_identities']} individuals set aside for testing.")


def parse_seeds(text: str | Sequence[int] | None) -> tuple[int, ...]:
    """``"0, 1, 2"`` -> (0, 1, 2); empty -> (0,)."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return (0,)
    if not isinstance(text, str):
        return tuple(int(x) for x in text)
    try:
        seeds = tuple(int(p) for p in text.replace(";", ",").replace(" ", ",").split(",") if p.strip())
    except ValueError:
        raise ValueError(f"Seeds must be whole numbers separated by commas, e.g. 0, 1, 2 (got {text!r}).") from None
    if not seeds or any(s < 0 for s in seeds):
        raise ValueError("Give at least one seed, each 0 or more.")
    return tuple(dict.fromkeys(seeds))


def diagnose(cat: Catalogue, request: DiagnoseRequest, *, progress: Callable[[float, str], None] | None = None,
             should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Run the diagnostics now and store them as an evaluation (``rosette diagnose``; the ``diagnose`` job runs the
    same request in the background); returns the stored metrics."""
    return run_diagnose(cat, backbone=request.backbone or active_model_name(cat), benchmark=request.benchmark,
                        masker=request.masker, inpainter=request.inpainter, seeds=request.seeds,
                        user=curator_name(request.user), progress=progress, should_cancel=should_cancel,
                        keep_masks=request.keep_masks)


def submit_diagnose(cat: Catalogue, request: DiagnoseRequest) -> tuple[int, str]:
    """Queue a ``diagnose`` job (runs in the worker, shows in the Jobs tab); returns (job id, message)."""
    user = curator_name(request.user)
    if request.benchmark not in benchmark_names(cat):
        raise ValueError(f"There is no benchmark named {request.benchmark!r}.")
    request = replace(request, backbone=request.backbone or active_model_name(cat), user=user)
    job_id = queue.submit(cat, "diagnose", request.to_dict())
    return job_id, (f"Queued job #{job_id}: diagnose {request.backbone} on {request.benchmark} "
                    f"(masker {request.masker or masker_in_use()[0]}, inpainter {request.inpainter or 'default'}, "
                    f"seeds {list(request.seeds)}). "
                    "Follow it in the Jobs tab; the charts appear here when it has finished.")


@dataclass
class DiagnosisView:
    """One stored ``diagnose`` evaluation."""

    evaluation_id: int
    model: str
    benchmark: str
    created: str
    masker: str | None
    inpainter: str | None
    metrics: dict[str, Any] = field(repr=False)
    model_config: dict[str, Any] = field(repr=False)

    @property
    def label(self) -> str:
        return f"#{self.evaluation_id} · {self.model} on {self.benchmark} · {self.created}"

    def provenance(self, variant: str | None = None) -> str:
        """Model, weights, variant, masker, inpainter + seeds in one line (hover text)."""
        seeds = self.metrics.get("seeds")
        parts = [f"model {self.model} ({weights_label(self.model_config)})", f"benchmark {self.benchmark}"]
        if variant:
            parts.append(f"variant {variant}")
        parts.append(f"masker {self.masker or self.metrics.get('masker') or '?'}")
        parts.append(f"inpainter {self.metrics.get('inpainter', self.inpainter)} seeds {seeds}")
        parts.append(f"score {self.metrics.get('metric', 'cosine')}; evaluation #{self.evaluation_id}")
        return "; ".join(parts)


def diagnosis_choices(cat: Catalogue) -> list[tuple[str, int]]:
    """(label, evaluation id) of stored diagnose runs, newest first."""
    return [(_view(e).label, e.id) for e in list_evaluations(cat, kind="diagnose")]


def _view(e: Any) -> DiagnosisView:
    created = e.created_at.strftime("%Y-%m-%d %H:%M") if e.created_at else ""
    return DiagnosisView(evaluation_id=e.id, model=e.model_name, benchmark=e.benchmark_name or "?", created=created,
                         masker=e.masker, inpainter=e.inpainter, metrics=dict(e.metrics or {}),
                         model_config=dict(e.model_config or {}))


def load_diagnosis(cat: Catalogue, evaluation_id: int | None = None) -> DiagnosisView | None:
    """A stored diagnose evaluation (the newest when ``evaluation_id`` is None); None if there is none."""
    if evaluation_id is None:
        found = list_evaluations(cat, kind="diagnose", limit=1)
        return _view(found[0]) if found else None
    with cat.unit_of_work() as s:
        e = s.get(Evaluation, int(evaluation_id))
        if e is None or e.kind != "diagnose":
            raise ValueError(f"There is no stored diagnosis #{evaluation_id}.")
        return _view(e)


def context_sentence(m: dict[str, Any]) -> str | None:
    """The two background ratios read together, in one sentence a curator can act on (they can disagree:
    BG/FG paints the animal out, BG+Sil/FG leaves its outline in, so their gap is what the outline tells)."""
    bg, sil = m.get("bg_fg"), m.get("bg_sil_fg")
    if bg is None or sil is None:
        return None
    band, sil_band = m.get("bg_fg_band"), m.get("bg_sil_fg_band")
    start = (f"With the animal painted out, the background alone identifies {100 * bg:.0f}% as well as the coat "
             f"does; with the animal's outline left in, {100 * sil:.0f}%")
    if band == "HIGH":
        return start + ": the model leans on the background itself (place, vegetation), not on the animal."
    if sil_band == "HIGH" and band != "HIGH":
        return (start + ": the background itself is not the problem, the animal's outline is. The model may be "
                "matching body shape, pose or size rather than the coat pattern.")
    if sil_band == "MEDIUM" or band == "MEDIUM":
        return start + ": partly context. Check matches with Matched spots or the coat-only variant."
    return start + ": both low, so the model relies on the coat."


def diagnosis_summary_markdown(v: DiagnosisView) -> str:
    """The headline verdicts of a stored run, curator words first, ML terms on hover."""
    m = v.metrics
    band = m.get("bg_fg_band")
    tier = m.get("mirror_tier")
    ratio = m.get("cross_within_ratio")
    prov = html.escape(v.provenance(), quote=True)
    lines = [f"### {html.escape(v.model)} on {html.escape(v.benchmark)} "
             f"<span title=\"{prov}\">(run #{v.evaluation_id}, {v.created}, {m.get('n_images', '?')} test photos)</span>",
             f"- {tip('Background vs coat', 'context reliance BG/FG = macro mAP(background_inpainted) / macro mAP(foreground_only)')}: "
             f"<span title=\"{prov}\">{fmt(m.get('bg_fg'))}</span> — {html.escape(BAND_WORDS.get(band, 'not available'))}"
             + (f" ({tip(band, 'risk band: LOW < 0.95 <= MEDIUM <= 1.10 < HIGH')})" if band else ""),
             f"- {tip('Background + outline vs coat', 'BG+Sil/FG = macro mAP(background_only) / macro mAP(foreground_only)')}: "
             f"<span title=\"{prov}\">{fmt(m.get('bg_sil_fg'))}</span> ({m.get('bg_sil_fg_band') or '—'})"
             + (f"\n  {html.escape(context_sentence(m))}" if context_sentence(m) else ""),
             f"- {tip('Mirror check', 'laterality: mean mirror similarity s(x, flip(x)) on foreground cut-outs and its tier')}: "
             f"mean likeness to the mirror image <span title=\"{prov}\">{fmt(m.get('mirror_sim_mean'))}</span> "
             f"± {fmt(m.get('mirror_sim_std'))}: the model {html.escape(TIER_WORDS.get(tier, 'n/a'))} "
             f"({tip(tier or '—', 'mirror tier: aware < 0.85, moderate 0.85-0.96, strong shortcut 0.96-0.99, symmetric > 0.99')}).",
             f"- {tip('Photos whose mirror image looks more like another animal', 'count of danger_margin > 0')}: "
             f"{m.get('danger_margin_positive', '—')} of {m.get('n_images', '?')}; "
             f"{tip('mirrored-query ratio', 'mAP(mirrored queries) / mAP(regular queries)')}: "
             f"{fmt(m.get('mirrored_query_ratio'))}",
             f"- {tip('Other flank vs same flank', 'cross/within ratio = cross-flank macro mAP / within-flank macro mAP')}: "
             f"<span title=\"{prov}\">{fmt(ratio)}</span> (recognising an animal from its other side is the real target)"]
    return "\n".join(lines)


def context_figure(v: DiagnosisView) -> Any:
    """Bars: how well each image variant alone identifies the animals (macro mAP), with BG/FG and its risk band."""
    import plotly.graph_objects as go  # lazy: plotly is only needed once a run is drawn

    maps = v.metrics.get("map_macro_by_variant") or {}
    by_seed = v.metrics.get("map_macro_background_inpainted_by_seed") or {}
    names = [n for n in VARIANTS if n in maps]
    colours = {"foreground_only": "#2e8b57", "background_inpainted": "#c0392b", "background_only": "#e67e22"}
    hover = []
    for n in names:
        extra = ""
        if n == "background_inpainted" and by_seed:
            extra = "<br>per seed: " + ", ".join(f"seed {k}: {fmt(x)}" for k, x in by_seed.items())
        hover.append(f"{VARIANT_WORDS[n]} ({n})<br>average precision per animal (macro mAP) {fmt(maps[n])}{extra}"
                     f"<br>{html.escape(v.provenance(n)).replace('; ', '<br>')}")
    fig = go.Figure(go.Bar(x=[VARIANT_WORDS[n] for n in names], y=[maps[n] for n in names],
                           marker_color=[colours.get(n, "#8c7b6b") for n in names],
                           text=[fmt(maps[n]) for n in names], textposition="outside",
                           hovertext=hover, hoverinfo="text"))
    band = v.metrics.get("bg_fg_band") or "n/a"
    band_colour = {"LOW": "#2e8b57", "MEDIUM": "#daa520", "HIGH": "#c0392b"}.get(band, "#777")
    fig.add_annotation(xref="paper", yref="paper", x=1.0, y=1.14, showarrow=False, align="right",
                       text=f"<b>Background ÷ coat = {fmt(v.metrics.get('bg_fg'), 2)}</b> "
                            f"<span style='color:{band_colour}'>({band} risk)</span>",
                       hovertext="BG/FG = macro mAP(background_inpainted) / macro mAP(foreground_only); "
                                 "LOW < 0.95, MEDIUM 0.95-1.10, HIGH > 1.10")
    top = max([x for x in maps.values() if x is not None] or [1.0])
    fig.update_layout(title="How well each part of the photo identifies the animals", height=380,
                      margin=dict(l=50, r=20, t=80, b=40), showlegend=False,
                      yaxis=dict(title="average precision per animal", range=[0, min(1.05, top * 1.25 + 0.02)]))
    return fig


def mirror_histogram_figure(v: DiagnosisView) -> Any:
    """Histogram of per-photo mirror similarity with the tier bands shaded and named above the plot."""
    import plotly.graph_objects as go  # lazy: plotly is only needed once a run is drawn

    per = v.metrics.get("per_image") or {}
    sims = [x for x in per.get("mirror_sim", []) if x is not None]
    ids = [i for i, x in zip(per.get("image_ids", []), per.get("mirror_sim", [])) if x is not None]
    lo = min([0.7, *sims]) - 0.02 if sims else 0.7
    fig = go.Figure()
    for k, (name, a, b, colour) in enumerate(TIER_BANDS):
        shown_a = max(a, lo)
        if b <= shown_a:
            continue
        fig.add_vrect(x0=shown_a, x1=b, fillcolor=colour, line_width=0, layer="below")
        fig.add_annotation(x=(shown_a + b) / 2, xref="x", y=1.02 + 0.07 * (k % 2), yref="paper", yanchor="bottom",
                           text=name, showarrow=False, font=dict(size=11),
                           hovertext=f"mirror tier '{name}': mean mirror similarity from {a:g} to {b:g}")
    fig.add_trace(go.Histogram(x=sims, nbinsx=min(40, max(10, len(sims) // 3)), marker_color="#6b4f3a",
                               customdata=ids, name="photos",
                               hovertemplate="likeness to own mirror image %{x}<br>%{y} photos<br>"
                                             + html.escape(v.provenance("foreground_only vs mirror")).replace("; ", "<br>")
                                             + "<extra></extra>"))
    mean = v.metrics.get("mirror_sim_mean")
    if mean is not None:
        fig.add_vline(x=mean, line_dash="dash", line_color="#222", annotation_text=f"mean {mean:.3f}",
                      annotation_position="top left",
                      annotation_hovertext=f"mean mirror similarity {mean:.3f}: tier {v.metrics.get('mirror_tier')}")
    fig.update_layout(title="How alike each photo and its mirror image look to the model", height=400,
                      margin=dict(l=50, r=20, t=110, b=40), bargap=0.05, showlegend=False,
                      xaxis=dict(title="likeness to own mirror image (mirror similarity)", range=[lo, 1.0]),
                      yaxis=dict(title="photos"))
    return fig


def flank_rows(v: DiagnosisView, *, with_same_sighting: bool = False) -> list[list[Any]]:
    """Rows under FLANK_HEADERS: within-flank, cross-flank and their ratio (macro/micro mAP, CMC@1/5/10)."""
    m = v.metrics
    suffix = "_with_same_sighting" if with_same_sighting else ""
    rows: list[list[Any]] = []
    for key, words in (("within_flank", "Same flank (left→left, right→right)"),
                       ("cross_flank", "Other flank (left→right, right→left)")):
        r = m.get(key + suffix) or {}
        cmc = r.get("cmc_macro") or {}
        rows.append([words, fmt(r.get("map_macro")), fmt(r.get("map_micro")), fmt(cmc.get("1")), fmt(cmc.get("5")),
                     fmt(cmc.get("10")), r.get("n_queries", "—")])
    if not with_same_sighting:
        rows.append(["Other ÷ same flank (macro)", fmt(m.get("cross_within_ratio")), "", "", "", "", ""])
    return rows


FLANK_HELP = ("Average precision per animal = macro mAP (identity-balanced); per photo = micro mAP; "
              "'Right first' / 'in top 5' / 'in top 10' = CMC@1/5/10 (macro). Photos of the query's own sighting are "
              "left out of its gallery.")


# --------------------------------------------------------------------------- selective sensitivity

SENSITIVITY_HEADERS = ["What changes", "Slope", "95% interval", "Similarity at full strength",
                       "Moves the model more than another animal's coat?"]
SENSITIVITY_HELP = ("Slope = how much the model's similarity to the original photo falls per unit of change (least "
                    "squares over every photo and strength; more negative = moved more); the interval is a bootstrap "
                    "over photos. Selectivity = identity slope ÷ steepest context slope: above 1, a different animal's "
                    "coat moves the model more than any change of background, lighting or viewpoint, as it should.")


def sensitivity(cat: Catalogue, request: SensitivityRequest, *, progress: Callable[[float, str], None] | None = None,
                should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Measure the selective sensitivity now and store it as an evaluation (``rosette diagnose --sensitivity``; the
    ``sensitivity`` job runs the same request); returns the stored figures. Test photos without a mask are refused
    with their names unless ``request.mask_missing``."""
    return run_sensitivity(cat, backbone=request.backbone or active_model_name(cat), benchmark=request.benchmark,
                           seed=request.seed, inpainter=request.inpainter, identity_edit=request.identity_edit,
                           mask_missing=request.mask_missing, masker=request.masker,
                           user=curator_name(request.user), progress=progress, should_cancel=should_cancel)


def submit_sensitivity(cat: Catalogue, request: SensitivityRequest) -> tuple[int, str]:
    """Queue a ``sensitivity`` job (the panel's button); returns (job id, message). A benchmark whose test photos
    lack masks is refused at once, naming them, unless the request asks to mask them first."""
    user = curator_name(request.user)
    if request.benchmark not in benchmark_names(cat):
        raise ValueError(f"There is no benchmark named {request.benchmark!r}.")
    data = load_benchmark(cat, request.benchmark, split="test")
    missing, empty = unusable_masks(cat, data.image_ids)
    automatic = empty_automatic_masks(cat, [i for i, _ in empty])
    by_hand = [p for p in empty if p[0] not in set(automatic)] if request.mask_missing else empty
    if by_hand or (missing and not request.mask_missing):  # the job makes again the empty masks a batch run made
        raise MissingMasksError(data.name, [] if request.mask_missing else missing, len(data), empty=by_hand,
                                automatic=automatic, masked_first=request.mask_missing)
    identity_edit_in_use(request.identity_edit)  # an unknown edit is refused before queueing
    request = replace(request, backbone=request.backbone or active_model_name(cat), user=user)
    job_id = queue.submit(cat, "sensitivity", request.to_dict())
    redo = f" and {len(automatic)} with an empty automatic mask" if automatic else ""
    masking = (f" {len(missing)} photos without a mask{redo} are masked first "
               f"({request.masker or masker_in_use()[0]})." if missing or automatic else "")
    return job_id, (f"Queued job #{job_id}: selective sensitivity of {request.backbone} on {request.benchmark} "
                    f"({len(data)} test photos x 4 kinds of change x 4 strengths, seed {request.seed}).{masking} "
                    "The curves appear here when it has finished; follow it in the Jobs tab.")


def sensitivity_job_status(cat: Catalogue, job_id: int | None) -> tuple[str, int | None, bool]:
    """(what the curator reads, the stored evaluation id once finished, whether the job is over)."""
    if not job_id:
        return "", None, True
    job = queue.get_job(cat, int(job_id))
    if job.status == JobStatus.succeeded:
        r = job.result or {}
        return f"Job #{job.id} finished: {r.get('summary', '')}.", r.get("evaluation_id"), True
    if job.status in (JobStatus.failed, JobStatus.cancelled):
        return f"Job #{job.id} {job.status.value}: {job.message or job.error or ''}", None, True
    return f"Job #{job.id} {job.status.value}: {job.progress:.0%} {job.message or ''}", None, False


@dataclass
class SensitivityView:
    """One stored ``sensitivity`` evaluation."""

    evaluation_id: int
    model: str
    benchmark: str
    created: str
    metrics: dict[str, Any] = field(repr=False)
    model_config: dict[str, Any] = field(repr=False)

    @property
    def label(self) -> str:
        sel = self.metrics.get("selectivity")
        return (f"#{self.evaluation_id} · {self.model} on {self.benchmark} · selectivity "
                f"{'unbounded' if sel is None else f'{sel:.2f}'} · {self.created}")

    def provenance(self) -> str:
        """Model, weights, edits, seed, photos and inpainter in one line (hover text)."""
        m, e = self.metrics, self.metrics.get("edits") or {}
        return "; ".join([
            f"model {self.model} ({weights_label(self.model_config)}, fingerprint {m.get('model_fingerprint', '?')})",
            f"benchmark {self.benchmark}, {m.get('n_images', '?')} test photos (masks: "
            + ", ".join(f"{k} {v}" for k, v in (m.get("masks") or {}).get("sources", {}).items()) + ")",
            f"edits at strengths {e.get('strengths')}, seed {e.get('seed')}, settings {e.get('settings_fingerprint')}",
            f"identity edit {e.get('identity')}", f"backgrounds painted out by {m.get('inpainter')}",
            f"score {m.get('metric', 'cosine')}; evaluation #{self.evaluation_id}"])


def _sensitivity_view(e: Any) -> SensitivityView:
    created = e.created_at.strftime("%Y-%m-%d %H:%M") if e.created_at else ""
    return SensitivityView(evaluation_id=e.id, model=e.model_name, benchmark=e.benchmark_name or "?",
                           created=created, metrics=dict(e.metrics or {}), model_config=dict(e.model_config or {}))


def sensitivity_choices(cat: Catalogue) -> list[tuple[str, int]]:
    """(label, evaluation id) of stored sensitivity runs, newest first."""
    return [(_sensitivity_view(e).label, e.id) for e in list_evaluations(cat, kind=SENSITIVITY_KIND)]


def load_sensitivity(cat: Catalogue, evaluation_id: int | None = None) -> SensitivityView | None:
    """A stored sensitivity run (the newest when ``evaluation_id`` is None); None if there is none."""
    if evaluation_id is None:
        found = list_evaluations(cat, kind=SENSITIVITY_KIND, limit=1)
        return _sensitivity_view(found[0]) if found else None
    with cat.unit_of_work() as s:
        e = s.get(Evaluation, int(evaluation_id))
        if e is None or e.kind != SENSITIVITY_KIND:
            raise ValueError(f"There is no stored sensitivity run #{evaluation_id}.")
        return _sensitivity_view(e)


def sensitivity_summary_markdown(v: SensitivityView) -> str:
    """The verdict first, then the selectivity with its interval (ML terms and provenance on hover)."""
    m = v.metrics
    prov = html.escape(v.provenance(), quote=True)
    sel, (lo, hi) = m.get("selectivity"), (m.get("selectivity_ci") or [None, None])[:2]
    sel_text = "unbounded (no change of context moves the model)" if sel is None else fmt(sel, 2)
    interval = f" (95% interval {fmt(lo, 2)} to {fmt(hi, 2)})" if lo is not None and hi is not None else ""
    verdicts = m.get("verdicts") or [m.get("verdict", "")]
    lines = [(f"### {html.escape(v.model)} on {html.escape(v.benchmark)} <span title=\"{prov}\">(run #{v.evaluation_id}, "
              f"{v.created}, {m.get('n_images', '?')} test photos)</span>"),
             f"**{html.escape(verdicts[0])}**",
             (f"- {tip('Selectivity', 'ID-Sim selectivity = |identity slope| / max |context slope| (background, lighting, viewpoint)')}: "
              f"<span title=\"{prov}\" id=\"diag-sens-selectivity\">{sel_text}</span>{interval}")]
    lines += [f"- {html.escape(text)}" for text in verdicts[1:]]
    return "\n".join(lines)


def sensitivity_rows(v: SensitivityView) -> list[list[Any]]:
    """Rows under SENSITIVITY_HEADERS, one per dimension, the identity (the change that should count) last."""
    dims = v.metrics.get("dimensions") or {}
    ident = abs((dims.get("identity") or {}).get("slope") or 0.0)
    rows = []
    for d in DIMENSIONS:
        st = dims.get(d) or {}
        slope = st.get("slope")
        ci = (f"{st['ci_low']:+.3f} to {st['ci_high']:+.3f}" if st.get("ci_low") is not None
              and st.get("ci_high") is not None else "—")
        more = "—" if d == "identity" or slope is None else ("yes" if abs(slope) >= ident else "no")
        curve = st.get("curve") or []
        rows.append([f"{DIMENSION_WORDS[d][0].upper()}{DIMENSION_WORDS[d][1:]} ({d})",
                     "—" if slope is None else f"{slope:+.3f}", ci, fmt(curve[-1] if curve else None), more])
    return rows


def sensitivity_plot(v: SensitivityView) -> Any:
    """The four curves (plotly), provenance on hover."""
    return sensitivity_figure(v.metrics, provenance=v.provenance())

