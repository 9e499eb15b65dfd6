// Rosette match review keyboard shortcuts (installed once per page by the Match review tab).
// One key per decision: M same, N not, U unsure, I new individual, Z undo, arrows previous / next.
// A key presses the button with that elem_id, only while the button is visible (the Match review
// tab is open) and never while the curator is typing in a text box, list or editable area.
(() => {
  if (window.__rosetteMatchKeys) return;
  window.__rosetteMatchKeys = true;
  const KEYS = {
    m: "match-same", n: "match-not", u: "match-unsure", i: "match-new", z: "match-undo",
    ArrowLeft: "match-prev", ArrowRight: "match-next",
  };
  const typing = (t) => !!t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName || ""));
  const buttonFor = (id) => {
    const el = document.getElementById(id);
    if (!el) return null;
    return el.tagName === "BUTTON" ? el : el.querySelector("button");
  };
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || e.repeat || typing(e.target)) return;
    const id = KEYS[e.key.length === 1 ? e.key.toLowerCase() : e.key];
    if (!id) return;
    const btn = buttonFor(id);
    if (!btn || btn.disabled || btn.offsetParent === null) return;  // tab hidden or button disabled
    e.preventDefault();
    btn.click();
  });
})();
