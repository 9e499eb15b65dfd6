// Rosette match review keyboard shortcuts (installed once per page by the Match review tab).
// One key per decision: M same, N not, U unsure, I new individual, Z undo, arrows previous / next;
// F accepts the suggested flank (Match review and Mask); S shows the matched spots of the compared pair.
// A key presses the button with that elem_id, only while the button is visible (the Match review
// tab is open) and never while the curator is typing in a text box, list or editable area.
// ? shows (and Escape hides) the list of keys. The photo to identify and the chosen candidate zoom and pan
// together: the wheel (or + / -) zooms, dragging pans, a double click (or 0) shows the whole photo again.
(() => {
  if (window.__rosetteMatchKeys) return;
  window.__rosetteMatchKeys = true;
  const KEYS = {
    m: "match-same", n: "match-not", u: "match-unsure", i: "match-new", z: "match-undo",
    ArrowLeft: "match-prev", ArrowRight: "match-next",
    f: ["match-accept-flank", "mask-accept-flank"],  // accept the suggested flank (Match review or Mask)
    s: "match-show-spots",  // show the matched spots of the photo and the chosen candidate
  };
  const HELP = [
    ["Match review", [["M", "same individual as the chosen candidate"], ["N", "not the same"], ["U", "unsure"],
                      ["I", "a new individual"], ["Z", "undo my last decision"], ["← / →", "previous / next photo"],
                      ["F", "accept the suggested flank"], ["S", "show the matched spots"]]],
    ["Photos (Match review)", [["wheel, + / −", "zoom the photo and the candidate together"],
                               ["drag", "pan both"], ["double click, 0", "the whole photos again"]]],
    ["Mask", [["F", "accept the suggested flank"]]],
    ["Anywhere", [["?", "this list"], ["Esc", "close it"]]],
  ];
  const typing = (t) => !!t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName || ""));
  const buttonFor = (id) => {
    const el = document.getElementById(id);
    if (!el) return null;
    return el.tagName === "BUTTON" ? el : el.querySelector("button");
  };

  // ---- the keys overlay
  let help = null;
  const showHelp = (on) => {
    if (!help) {
      help = document.createElement("div");
      help.id = "rosette-keys-help";
      help.setAttribute("role", "dialog");
      help.setAttribute("aria-label", "Keyboard shortcuts");
      help.style.cssText = "position:fixed;inset:0;z-index:2000;display:none;align-items:center;" +
        "justify-content:center;background:rgba(0,0,0,.45)";
      const card = document.createElement("div");
      card.style.cssText = "background:var(--background-fill-primary,#fff);color:var(--body-text-color,#222);" +
        "border-radius:10px;padding:18px 26px;max-width:560px;box-shadow:0 8px 30px rgba(0,0,0,.3);font-size:14px";
      card.innerHTML = "<h3 style='margin:0 0 8px'>Keyboard shortcuts</h3>" + HELP.map(([where, keys]) =>
        `<h4 style='margin:10px 0 4px'>${where}</h4><table>` + keys.map(([k, what]) =>
          `<tr><td style='padding:2px 14px 2px 0'><kbd>${k}</kbd></td><td>${what}</td></tr>`).join("") +
        "</table>").join("") + "<p style='margin:10px 0 0;opacity:.7'>Keys never fire while you type in a box.</p>";
      help.appendChild(card);
      help.addEventListener("click", (e) => { if (e.target === help) showHelp(false); });
      document.body.appendChild(help);
    }
    help.style.display = on ? "flex" : "none";
  };

  // ---- linked zoom and pan of the photo to identify and the chosen candidate
  const ZOOMED = ["match-query", "match-compare"];
  const view = { scale: 1, x: 0, y: 0 };
  const images = () => ZOOMED.map((id) => document.querySelector(`#${id} img`)).filter(Boolean);
  const apply = () => {
    for (const img of images()) {
      img.style.transformOrigin = "center center";
      img.style.transform = view.scale === 1 ? "" : `translate(${view.x}px, ${view.y}px) scale(${view.scale})`;
      img.style.cursor = view.scale > 1 ? "grab" : "";
      if (img.parentElement) img.parentElement.style.overflow = "hidden";
      img.dataset.zoom = String(view.scale);
    }
  };
  const zoom = (factor) => {
    view.scale = Math.min(8, Math.max(1, view.scale * factor));
    if (view.scale === 1) { view.x = 0; view.y = 0; }
    apply();
  };
  const reset = () => { view.scale = 1; view.x = 0; view.y = 0; apply(); };
  // anywhere on the picture of either photo (Gradio wraps the <img> in a button and may lay a layer over it),
  // not on its small icon buttons (fullscreen)
  const over = (t) => {
    if (!t || !t.closest || t.closest("[aria-label], .icon-button, .icon-buttons")) return false;
    const box = ZOOMED.map((id) => t.closest(`#${id}`)).find(Boolean);
    return !!box && !!box.querySelector("img");
  };
  document.addEventListener("wheel", (e) => {
    if (!over(e.target)) return;
    e.preventDefault();
    zoom(e.deltaY < 0 ? 1.25 : 0.8);
  }, { passive: false });
  let drag = null;
  document.addEventListener("mousedown", (e) => {
    if (!over(e.target) || view.scale === 1 || e.button !== 0) return;
    e.preventDefault();
    drag = { x: e.clientX - view.x, y: e.clientY - view.y };
  });
  document.addEventListener("mousemove", (e) => {
    if (!drag) return;
    view.x = e.clientX - drag.x;
    view.y = e.clientY - drag.y;
    apply();
  });
  document.addEventListener("mouseup", () => { drag = null; });
  document.addEventListener("dblclick", (e) => { if (over(e.target)) reset(); });
  // a new photo or candidate starts whole
  document.addEventListener("load", (e) => { if (over(e.target)) reset(); }, true);

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || e.repeat || typing(e.target)) return;
    if (e.key === "?") { e.preventDefault(); showHelp(!(help && help.style.display === "flex")); return; }
    if (e.key === "Escape" && help && help.style.display === "flex") { e.preventDefault(); showHelp(false); return; }
    const reviewing = images().some((img) => img.offsetParent !== null);
    if (reviewing && (e.key === "+" || e.key === "=")) { e.preventDefault(); zoom(1.25); return; }
    if (reviewing && (e.key === "-" || e.key === "_")) { e.preventDefault(); zoom(0.8); return; }
    if (reviewing && e.key === "0") { e.preventDefault(); reset(); return; }
    const ids = KEYS[e.key.length === 1 ? e.key.toLowerCase() : e.key];
    if (!ids) return;
    const btn = [].concat(ids).map(buttonFor)
      .find((b) => b && !b.disabled && b.offsetParent !== null);  // the one on the open tab, enabled
    if (!btn) return;
    e.preventDefault();
    btn.click();
  });
})();
