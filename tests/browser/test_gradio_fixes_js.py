"""What the rewritten Gradio code does, run in Chromium: the small scripts of ``tests/test_gradio_assets.py``
rewritten by ``app.gradio_assets`` and evaluated in a blank page (no server)."""

from __future__ import annotations

from app.gradio_assets import index_tree_lookups, send_changed_statuses
from tests.test_gradio_assets import STATUSES, TREE

# a tree of 40 nodes, three deep; every lookup compared with the original walk, before and after the tree is
# re-linked (a re-render grafting new children on node 3, a reload with other ids)
TREE_CHECK_JS = """
(script) => {
  const T = new Function(script + ';return T;')();
  const walk = (n, id) => { if (n.id === id) return n; for (const c of n.children || []) { const f = walk(c, id);
    if (f) return f; } return null; };
  const make = (base) => Array.from({length: 4}, (_, i) => ({id: base + 10 * i + 1, children: Array.from(
    {length: 3}, (_, j) => ({id: base + 10 * i + 2 + j, children: [{id: base + 10 * i + 5 + j, children: []}]}))}));
  const tree = new T(make(0));
  const out = {first: [], after_graft: [], after_reload: []};
  const same = (label, ids) => { for (const id of ids) out[label].push(tree.find(id) === walk(tree.root, id)); };
  const ids = Array.from({length: 60}, (_, i) => i);
  same('first', ids);
  const old = tree.find(3);
  tree.rerender({id: 3, children: [{id: 99, children: []}]});
  same('after_graft', [...ids, 99]);
  out.grafted = tree.find(99)?.id ?? null;
  out.old_child_gone = tree.find(6) === null;
  out.node_kept = tree.find(3) === old;
  tree.reload(make(100));
  same('after_reload', [...ids, 99, 101, 135]);
  out.reloaded = [tree.find(101)?.id ?? null, tree.find(1)];
  return out;
}
"""

STATUS_CHECK_JS = """
async (script) => {
  const B = new Function(script + ';return B;')();
  const b = new B();
  const rounds = [];
  const round = async () => { b.sent = []; await b.update_loading_stati_state(); rounds.push(b.sent); };
  b.loading_stati.current = {1: {status: 'pending', eta: null}, 2: {status: 'pending', eta: null}};
  await round();                                                     // both new
  await round();                                                     // nothing changed
  b.loading_stati.current[1] = {status: 'pending', eta: null};       // a new object, the same status
  await round();
  b.loading_stati.current[2].status = 'complete';                    // changed in place
  await round();
  b.loading_stati.current[1] = {};                                    // cleared
  b.loading_stati.current[3] = {status: 'pending'};                   // a component seen for the first time
  await round();
  return rounds;
}
"""


def test_the_indexed_tree_lookup_answers_as_the_walk_does_as_the_tree_is_relinked(page):
    script, found = index_tree_lookups(TREE)
    assert found
    out = page.evaluate(TREE_CHECK_JS, script)
    assert all(out["first"]) and len(out["first"]) == 60
    assert all(out["after_graft"]) and all(out["after_reload"])
    assert out["grafted"] == 99 and out["old_child_gone"] and out["node_kept"]
    assert out["reloaded"] == [101, None]


def test_a_status_is_sent_again_only_when_it_changed(page):
    script, found = send_changed_statuses(STATUSES)
    assert found
    rounds = page.evaluate(STATUS_CHECK_JS, script)
    assert rounds == [[[1, "pending"], [2, "pending"]], [], [], [[2, "complete"]], [[1, None], [3, "pending"]]]
    # the original sends every status every time
    assert page.evaluate(STATUS_CHECK_JS, STATUSES)[1] == [[1, "pending"], [2, "pending"]]
