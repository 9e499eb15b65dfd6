"""The errors an action raises for a person to read, in one place for the tabs and the commands (which catch them
and show their words) so that neither reaches into the store for them."""

from __future__ import annotations

from core.io.images import ImageDecodeError
from core.requests import RequestError
from db.catalogue import CatalogueError, ConflictError, NotFoundError
from db.io.ingest import IngestError, ManifestError
from db.users import PermissionDenied

__all__ = ["CatalogueError", "ConflictError", "ImageDecodeError", "IngestError", "ManifestError", "NotFoundError",
           "PermissionDenied", "RequestError"]
