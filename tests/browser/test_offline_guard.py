"""The browser the tests drive cannot reach the internet, and says when a page tried: what lets the other browser
tests assert that the app works offline (``assert not page.external_requests``)."""

from __future__ import annotations


def test_a_request_leaving_the_machine_fails_and_is_recorded(page):
    page.goto("about:blank")
    outcome = page.evaluate("""() => fetch('http://example.org/tile.png', {mode: 'no-cors'})
                                      .then(() => 'reached', () => 'refused')""")
    assert outcome == "refused"
    assert page.external_requests == ["http://example.org/tile.png"]
