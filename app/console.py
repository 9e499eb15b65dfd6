"""Terminal output of the ``rosette`` commands: aligned tables, and text that cannot drive the terminal."""

from __future__ import annotations

import sys
from collections.abc import Sequence

_CONTROL = {c: f"\\x{c:02x}" for c in [*range(32), 127]}


def printable(value: object) -> str:
    """``value`` as text safe for a terminal: control characters (escape codes, NUL, line breaks) are shown
    as ``\\xNN`` instead of being sent to the terminal raw."""
    return str(value).translate(_CONTROL)


def print_table(rows: Sequence[Sequence[object]], headers: Sequence[str], *, file=None) -> None:
    """Plain aligned text table; every cell goes through :func:`printable`."""
    file = file or sys.stdout
    cells = [[printable(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)), file=file)
