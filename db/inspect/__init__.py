"""Inspection in the store: masks, flank suggestions, diagnostics and selective-sensitivity runs,
the embedding map, the models leaderboard."""
