"""CSV cells that are safe to open in a spreadsheet (OWASP "CSV injection"): what looks like a formula is refused
on input (Kaggle's row ids) and defused on output (audit trail, catalogue export) with a leading apostrophe."""

from __future__ import annotations


def is_formula(text: str) -> bool:
    """A cell a spreadsheet would run as a formula: starts with =, @, a tab or a line break, or with + / -
    without being a plain number (so "-1" and "+2.5" stay allowed, "-2+3" does not)."""
    t = str(text)
    if not t:
        return False
    if t[0] in "=@\t\r":
        return True
    if t[0] in "+-":
        try:
            float(t)
        except ValueError:
            return True
    return False


def defuse_cell(text: object) -> str:
    """A cell safe to open in a spreadsheet: a formula-like one (:func:`is_formula`) gets a leading quote."""
    s = "" if text is None else str(text)
    return "'" + s if is_formula(s) else s
