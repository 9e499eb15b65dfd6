"""A finished field fit's answer in one line: the status line of its tab and the line its job leaves in the Jobs
list. Pure functions of the stored answer (no catalogue, no queue), so the job kinds can name them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The command's advice in a refusal -> the tab's (its fields and buttons, not the command's options).
_CLI_ADVICE = "(rosette density without --flanks)"
_TAB_ADVICE = "(Fit density above)"
_TAB_WORDS = {_CLI_ADVICE: _TAB_ADVICE, "(--iterations)": "(Iterations per chain)"}


def tab_words(reason: str) -> str:
    """A refusal written for the command, with its options named as the tab's fields."""
    for cli, tab in _TAB_WORDS.items():
        reason = reason.replace(cli, tab)
    return reason


def figure(x: float | None, digits: int) -> str:
    """A figure with thousands separators, or a dash where there is none."""
    return "—" if x is None else f"{x:,.{digits}f}"


def flank_answer_words(answer: Mapping[str, Any]) -> str:
    """A two-flank density fit: "done: D ... (95% credible interval ...); R-hat ..., least effective sample size
    ...", or "refused: <its one sentence>" with no number."""
    if answer.get("refused"):
        return f"refused: {tab_words(str(answer['reason']).rstrip('.'))}."
    return (f"done: D {figure(answer['D_per_100km2'], 1)} animals per 100 km² (95% credible interval "
            f"{figure(answer['ci_low'], 1)} – {figure(answer['ci_high'], 1)}); R-hat at most "
            f"{figure(answer['rhat_max'], 3)}, least effective sample size {figure(answer['ess_min'], 0)}.")


def models_answer_words(answer: Mapping[str, Any]) -> str:
    """Density models beyond the null: "done: N models ranked; the best by AICc is ...", "done: <the model>.", or
    "refused: <its one sentence>"."""
    if answer.get("refused"):
        return f"refused: {answer['reason']}"
    if answer["kind"] == "compare":
        return f"done: {len(answer['table'])} models ranked; the best by AICc is {answer['table'][0]['model']}."
    return f"done: {answer['model']}."


def jobs_list_line(words: str) -> str:
    """A status tail as the Jobs list shows it, beside the job's status: without the "done: " the status says."""
    return words.removeprefix("done: ")
