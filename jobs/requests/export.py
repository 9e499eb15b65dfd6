"""Requests of the exports: the catalogue as CSVs and sheets, and a Kaggle submission (staged from uploads by
the Export tab, run by the ``export`` job or by ``rosette export-kaggle``)."""

from __future__ import annotations

from dataclasses import dataclass

from core.io.privacy import DEFAULT_PEOPLE, check_people_choice
from core.requests import Request

KAGGLE_VARIANTS = ("full_rgb", "foreground_only")
"""What the model sees of a Kaggle image: the whole photo, or the animal only (the PNG's alpha as the mask)."""


def _check_variant(variant: str) -> None:
    if variant not in KAGGLE_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose {' or '.join(KAGGLE_VARIANTS)}")


@dataclass(frozen=True)
class ExportCatalogueRequest(Request):
    """The catalogue as a zip of CSVs and per-individual sheets, written to ``out`` (None: a new file under the
    data directory's exports); ``people``: the sheet pictures of photos showing people are blurred (the default),
    left out (``omit``) or kept unblurred (``keep``: only when chosen, and recorded in the audit trail)."""

    user: str
    include_inactive: bool = False
    out: str | None = None
    people: str = DEFAULT_PEOPLE

    def __post_init__(self) -> None:
        check_people_choice(self.people)


@dataclass(frozen=True)
class KaggleUploadRequest(Request):
    """The Export tab's inputs: the uploaded test.csv (``test_csv_name``: its name as the curator knows it), the
    images as an uploaded zip or a folder inside the data directory, and the model and variant to export with."""

    test_csv: str | None
    model: str
    images_zip: str | None = None
    images_dir: str | None = None
    variant: str = "full_rgb"
    user: str = "curator"
    test_csv_name: str | None = None

    def __post_init__(self) -> None:
        _check_variant(self.variant)


@dataclass(frozen=True)
class KaggleExportRequest(Request):
    """Write a Kaggle submission (row_id,similarity) for ``test_csv`` with the images in ``images_dir``.

    What the ``export`` job stores; ``model`` None is the active model; ``staged_images``: ``images_dir`` holds
    images unpacked from an upload, removed once the export is over."""

    test_csv: str
    images_dir: str
    out: str
    model: str | None = None
    variant: str = "full_rgb"
    staged_images: bool = False
    user: str = "curator"

    def __post_init__(self) -> None:
        _check_variant(self.variant)
