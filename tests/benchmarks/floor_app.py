"""Gradio's own floor: one button that updates one Markdown, served by the project's Gradio (same machine, same run).

Copied from the latency probe's /work/shared/tools/floor_app.py (beside review_latency.py, the probe that
``bench_review_latency.py`` grew out of), unchanged: no Gradio screen can answer a click faster than this one, so
Match review's figures are read as multiples of it. Usage: ``python floor_app.py PORT``.
"""
import sys, gradio as gr
n = {"i": 0}
def nxt():
    n["i"] += 1
    return f"Photo to identify: number {n['i']}"
with gr.Blocks() as demo:
    md = gr.Markdown("Photo to identify: number 0")
    gr.Button("Next").click(nxt, outputs=md)
demo.launch(server_port=int(sys.argv[1]), server_name="127.0.0.1")
