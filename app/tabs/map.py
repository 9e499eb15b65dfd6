"""Map tab: a picture of the embedding space. The chosen model's features of every photo, projected to 2-D by
UMAP in a background job (a Poincare disk for Lorentz models), coloured by individual, flank, mask solidity,
species or "undecided". Hover a point for its thumbnail; draw a box or lasso to open the photos (to review
them, or assign them to an individual). Maps of 1,000 points or more draw with WebGL (scattergl)."""

from __future__ import annotations

import json

import gradio as gr

from app.ui_base import UIContext, curator_action, guarded_viewer, plotly_js_path
from db.models import Role
from jobs.actions import map as mp
from jobs.actions import match as ms
from jobs.requests.map import AssignSelectionRequest, MapRequest

TITLE = "Map"
ORDER = 58
WEBGL_FROM = 1000  # points; below this the plot is SVG (crisper, and hover works without a GPU)

CSS = """
.map-plot { width: 100%; min-height: 560px; }
.map-empty { padding: 2rem; color: var(--body-text-color-subdued); }
.map-legend { display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: center; padding: 6px 4px;
              font-size: var(--text-sm); }
.map-key { display: inline-flex; align-items: center; gap: 5px; white-space: nowrap; }
.map-swatch { display: inline-block; width: 12px; height: 12px; border-radius: 50%; border: 1px solid #0003; }
"""
MAP_JS = """
const PLOTLY_URL = %(plotly)s;
const WEBGL_FROM = %(webgl)d;
function ensurePlotly(cb) {
  if (window.Plotly) return cb();
  let s = document.getElementById('rosette-plotly');
  if (!s) {
    s = document.createElement('script'); s.id = 'rosette-plotly'; s.src = PLOTLY_URL;
    document.head.appendChild(s);
  }
  s.addEventListener('load', cb, {once: true});
}
let tip = document.getElementById('map-tip');
if (!tip) {
  tip = document.createElement('div'); tip.id = 'map-tip';
  tip.style.cssText = 'position:fixed;display:none;pointer-events:none;z-index:1000;background:white;' +
    'border:1px solid #ccc;border-radius:6px;padding:4px;box-shadow:0 2px 8px rgba(0,0,0,.2);font-size:12px';
  tip.innerHTML = '<img style="display:block;max-width:160px;max-height:160px"><div class="cap"></div>';
  document.body.appendChild(tip);
}
function draw() {
  const holder = element.querySelector('.map-data');
  if (!holder || holder.dataset.drawn) return;
  holder.dataset.drawn = '1';
  const d = JSON.parse(holder.textContent);
  const plot = element.querySelector('.map-plot');
  const t0 = performance.now();
  ensurePlotly(() => {
    const gl = d.id.length >= WEBGL_FROM;
    const trace = {type: gl ? 'scattergl' : 'scatter', mode: 'markers', x: d.x, y: d.y, text: d.label,
      hoverinfo: 'text', marker: {size: gl ? 4 : 8, color: d.categorical ? d.colour : d.value, opacity: 0.85,
      colorscale: 'Viridis', showscale: !d.categorical}};
    const layout = {dragmode: 'select', height: 560, margin: {l: 30, r: 10, t: 40, b: 30}, hovermode: 'closest',
      title: {text: d.model + (d.poincare ? ' (Poincaré disk)' : '') + ' · coloured by ' + d.colour_by,
              font: {size: 14}},
      xaxis: {zeroline: false}, yaxis: {zeroline: false}};
    if (d.poincare) {
      layout.yaxis.scaleanchor = 'x';
      layout.shapes = [{type: 'circle', x0: -1, y0: -1, x1: 1, y1: 1, line: {color: '#999'}}];
    }
    Plotly.newPlot(plot, [trace], layout, {displaylogo: false, responsive: true}).then(() => {
      plot.dataset.renderMs = String(Math.round(performance.now() - t0));
      plot.dataset.ready = '1';
      plot.dataset.kind = trace.type;
    });
    plot.on('plotly_hover', (ev) => {
      const i = ev.points[0].pointIndex;
      tip.querySelector('img').src = d.thumb[i];
      tip.querySelector('.cap').textContent = '#' + d.id[i] + ' · ' + d.label[i];
      tip.dataset.imageId = String(d.id[i]);
      tip.style.left = (ev.event.clientX + 14) + 'px'; tip.style.top = (ev.event.clientY + 14) + 'px';
      tip.style.display = 'block';
    });
    plot.on('plotly_unhover', () => { tip.style.display = 'none'; });
    plot.on('plotly_selected', (ev) => {
      if (!ev || !ev.points) return;
      trigger('click', {ids: ev.points.map((p) => d.id[p.pointIndex])});
    });
  });
}
new MutationObserver(draw).observe(element, {childList: true, subtree: true});
draw();
"""


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    js = MAP_JS % {"plotly": json.dumps(f"gradio_api/file={plotly_js_path()}"), "webgl": WEBGL_FROM}
    with gr.Row(equal_height=True):
        model = gr.Dropdown(ms.matcher_choices(cat), value=ms.active_model(cat), label="Model", elem_id="map-model",
                            scale=2)
        colour = gr.Radio(list(mp.colour_choices()), value="individual", label="Colour by", elem_id="map-colour", scale=3)
        compute = gr.Button("Compute map", elem_id="map-compute", scale=0, min_width=150)
        show_button = gr.Button("Show", elem_id="map-show", scale=0, min_width=90)
    status = gr.Markdown(elem_id="map-status", elem_classes=["status-line"])
    plot = gr.HTML(mp.map_html(None), elem_id="map-area", css_template=CSS, js_on_load=js)
    selected = gr.State([])
    summary = gr.Markdown(elem_id="map-selection")
    gallery = gr.Gallery(label="Selected photos", columns=8, height=260, elem_id="map-gallery", allow_preview=True)
    with gr.Row(equal_height=True):
        target = gr.Textbox(label="Assign the selected photos to", placeholder="individual's name", max_lines=1,
                            elem_id="map-assign-name", scale=3)
        create_new = gr.Checkbox(label="Create it if new", value=False, elem_id="map-assign-new", scale=1,
                                 info="a name no individual has makes a new individual with these photos")
        assign = gr.Button("Assign", elem_id="map-assign", scale=0, min_width=110)

    def show(model_name, colour_by):
        payload = mp.map_payload(cat, model_name or ms.active_model(cat), colour_by or "individual")
        note = "" if payload is not None else mp.map_wait_note(cat, model_name or ms.active_model(cat))
        return mp.map_html(payload, note=note), (f"{len(payload['id'])} photos." if payload else "")

    @curator_action
    def queue(model_name, user):
        return mp.queue_map(cat, MapRequest(model=model_name or ms.active_model(cat), user=user))[1]

    @curator_action(role=Role.viewer)
    def pick(evt: gr.EventData):
        ids = (getattr(evt, "_data", None) or {}).get("ids") or []
        items, text = mp.selection(cat, ids)
        return ids, items, text

    @curator_action
    def do_assign(ids, name, new, user):
        return mp.assign_selection(cat, AssignSelectionRequest(image_ids=ids, individual=name, user=user,
                                                               create_new=bool(new)))

    ctx.on_refresh(guarded_viewer(show), inputs=[model, colour], outputs=[plot, status], on_tab_select=True)
    gr.on([model.input, colour.input, show_button.click], guarded_viewer(show), inputs=[model, colour],
          outputs=[plot, status], api_visibility="private")
    compute.click(queue, inputs=[model, ctx.user], outputs=[status], api_name="compute_map")
    plot.click(pick, outputs=[selected, gallery, summary], api_visibility="private")
    ctx.changed(assign.click(do_assign, inputs=[selected, target, create_new, ctx.user], outputs=[status],
                             api_name="assign_selection"))
