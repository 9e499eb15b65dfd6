"""The demo catalogue: 60 nyala photos of 10 individuals shipped in ``assets/demo``, six of them
without an identity so the match-review queue starts with new photos to decide.

``make run`` seeds it into an empty catalogue so a fresh clone (without
``../shared``) opens on something to look at. Attribution:
``assets/demo/ATTRIBUTION.md``.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from core.readers import IngestReport
from db.io.ingest import ingest_path
from db.models import Image

DEMO_DIR = Path(__file__).resolve().parent.parent / "assets" / "demo"
DEMO_MANIFEST = DEMO_DIR / "manifest.csv"


def catalogue_is_empty(cat) -> bool:
    """True when the catalogue holds no image at all."""
    with cat.unit_of_work() as session:
        return not (session.scalar(select(func.count(Image.id))) or 0)


def seed_demo_if_empty(cat, *, user: str = "demo", demo_dir: Path | None = None) -> IngestReport | None:
    """Import the demo photos (with identities and flanks) when the catalogue has no images.

    Returns the import report, or None when the catalogue already had images
    or the demo files are missing (e.g. an installed package without assets).
    """
    manifest = (demo_dir or DEMO_DIR) / "manifest.csv"
    if not manifest.is_file() or not catalogue_is_empty(cat):
        return None
    return ingest_path(cat, manifest, format="manifest", user=user)
