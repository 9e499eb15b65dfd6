// Rosette match review keyboard shortcuts (installed once per page by the Match review tab).
// One key per decision: M same, N not, U unsure, I new individual, Z undo, arrows previous / next;
// F accepts the suggested flank (Match review and Mask); S shows the matched spots of the compared pair.
// A key presses the button with that elem_id, only while the button is visible (the Match review
// tab is open) and never while the curator is typing in a text box, list or editable area.
(() => {
  if (window.__rosetteMatchKeys) return;
  window.__rosetteMatchKeys = true;
  const KEYS = {
    m: "match-same", n: "match-not", u: "match-unsure", i: "match-new", z: "match-undo",
    ArrowLeft: "match-prev", ArrowRight: "match-next",
    f: ["match-accept-flank", "mask-accept-flank"],  // accept the suggested flank (Match review or Mask)
    s: "match-show-spots",  // show the matched spots of the photo and the chosen candidate
  };
  const typing = (t) => !!t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName || ""));
  const buttonFor = (id) => {
    const el = document.getElementById(id);
    if (!el) return null;
    return el.tagName === "BUTTON" ? el : el.querySelector("button");
  };
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || e.repeat || typing(e.target)) return;
    const ids = KEYS[e.key.length === 1 ? e.key.toLowerCase() : e.key];
    if (!ids) return;
    const btn = [].concat(ids).map(buttonFor)
      .find((b) => b && !b.disabled && b.offsetParent !== null);  // the one on the open tab, enabled
    if (!btn) return;
    e.preventDefault();
    btn.click();
  });
})();
