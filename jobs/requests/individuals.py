"""Requests of an individual's page: open it (its history, stations, best photos, home range) and set its sex and
life stage. Nothing chosen (an individual id of None) is refused here in the words the Catalogue tab shows."""

from __future__ import annotations

from dataclasses import dataclass

from core.requests import Request
from db.field.individual_history import LIFE_STAGES, SEXES, check_trait
from jobs.requests._values import as_id, settle


@dataclass(frozen=True)
class IndividualHistoryRequest(Request):
    """Gather one individual's page."""

    individual_id: int | None

    def __post_init__(self) -> None:
        if self.individual_id is None:
            raise ValueError("Open an individual first.")
        settle(self, individual_id=as_id(self.individual_id, "individual"))


@dataclass(frozen=True)
class SetTraitsRequest(Request):
    """Set an individual's sex (female, male, unknown) and/or life stage (adult, subadult, juvenile, unknown).

    None leaves a trait as it is; an empty text clears it (not recorded). At least one must be given."""

    individual_id: int | None
    sex: str | None
    life_stage: str | None
    user: str

    def __post_init__(self) -> None:
        if self.individual_id is None:
            raise ValueError("Open an individual first.")
        if self.sex is None and self.life_stage is None:
            raise ValueError("Choose a sex or a life stage to set.")
        settle(self, individual_id=as_id(self.individual_id, "individual"),
               sex=check_trait(self.sex, SEXES, what="sex"),
               life_stage=check_trait(self.life_stage, LIFE_STAGES, what="life stage"))
