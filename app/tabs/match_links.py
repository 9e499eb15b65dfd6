"""Match review's flank links: the left- and right-flank identities the two-flank partial-identity density fit
(docs/density.md, "One-flank photos") found probably one animal, for a curator to confirm or reject."""

from __future__ import annotations

from app.ui_base import UIContext


def build_flank_links(ctx: UIContext) -> None:
    """The links panel of the Match review tab (built inside it, below the review area)."""
