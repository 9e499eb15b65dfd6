"""Benchmarks as stored objects: a named image set with frozen identities, flanks,
sightings and a fixed split (identity- or sighting-disjoint, seeded)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.identify.backbones.weights import sha256_file
from core.identify.splits import check_split_kind, is_column_split, make_split_any
from db.catalogue import CatalogueError
from db.embeddings import all_image_ids, pixel_key_of
from db.io.ingest import ingest_path
from db.models import Benchmark, BenchmarkImage, Image, Individual, Sighting
from db.session import Catalogue


@dataclass
class BenchmarkData:
    """What evaluation reads: image ids and frozen labels of one split, in a fixed order."""

    name: str
    benchmark_id: int
    image_ids: list[int]
    labels: list[str]
    flanks: list[str]
    sightings: list[str | None]
    content_hashes: list[str]

    def __len__(self) -> int:
        return len(self.image_ids)


def _file_sha256(path: Path) -> str:

    return sha256_file(path)


def _manifest_members(cat: Catalogue, manifest: Path, *, user: str,
                      split_column: str | None = None) -> list[tuple[int, str, str, str | None, str | None]]:
    """(image id, identity, flank, sighting, split column value) for every manifest row, importing missing
    photos first."""
    manifest = Path(manifest)
    with open(manifest, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        missing = {"filename", "identity", *([split_column] if split_column else [])} - set(reader.fieldnames or [])
        if missing:
            raise CatalogueError(f"{manifest.name}: missing column(s) {', '.join(sorted(missing))}")
        rows = list(reader)
    base = manifest.parent
    resolved: list[tuple[str, dict[str, str]]] = []
    for row in rows:
        path = base / row["filename"]
        if not path.exists():
            path = base / "images" / row["filename"]
        if not path.exists():
            raise CatalogueError(f"{manifest.name}: file {row['filename']!r} not found next to the manifest")
        resolved.append((_file_sha256(path), row))
    with cat.unit_of_work() as s:
        known = _whole_photo_annotations(s)
    if any(h not in known for h, _ in resolved):

        ingest_path(cat, manifest, format="manifest", user=user)
        with cat.unit_of_work() as s:
            known = _whole_photo_annotations(s)
    out = []
    for h, row in resolved:
        if h not in known:
            raise CatalogueError(f"{row['filename']}: could not be imported (import it in the Ingest tab, or `rosette import`, to see why)")
        if not (row.get("identity") or "").strip():
            continue  # an unlabelled photo cannot be scored in a benchmark
        out.append((known[h], row["identity"], (row.get("flank") or "unknown").lower(), row.get("sighting") or None,
                    row.get(split_column) if split_column else None))
    return out


def _catalogue_members(session: Session) -> list[tuple[int, str, str, str | None]]:
    rows = session.execute(
        select(Image.id, Individual.name, Image.flank, Sighting.key)
        .join(Individual, Image.individual_id == Individual.id)
        .outerjoin(Sighting, Image.sighting_id == Sighting.id)
        .order_by(Image.id)
    ).all()
    return [(r[0], r[1], r[2].value if hasattr(r[2], "value") else str(r[2]), r[3], None) for r in rows]


def create_benchmark(cat: Catalogue, name: str, *, manifest: str | Path | None = None, split: str = "identity",
                     test_fraction: float = 0.3, seed: int = 0, user: str = "curator", replace: bool = False) -> Benchmark:
    """Freeze an image set (from a manifest, or every assigned catalogue image) and its split.

    ``split``: ``identity`` / ``sighting`` (seeded random, ``test_fraction``), ``test-only`` (every photo is a
    test photo: a published test set evaluated whole) or ``column:<name>`` (the manifest's column decides:
    train / test per photo, e.g. ``column:source_split``).
    """
    try:
        check_split_kind(split)
    except ValueError as exc:
        raise CatalogueError(str(exc)) from None
    column = split.split(":", 1)[1] if is_column_split(split) else None
    if column and not manifest:
        raise CatalogueError(f"split {split!r} reads a manifest column; give --from-manifest")
    members = _manifest_members(cat, Path(manifest), user=user, split_column=column) if manifest else None
    with cat.unit_of_work() as s:
        if members is None:
            members = _catalogue_members(s)
        if len(members) < 4:
            raise CatalogueError("a benchmark needs at least four labelled images")
        existing = s.scalar(select(Benchmark).where(Benchmark.name == name))
        if existing is not None:
            if not replace:
                raise CatalogueError(f"a benchmark named {name!r} exists; pass replace to rebuild it")
            s.delete(existing)
            s.flush()
        seen: set[int] = set()  # one row per image, first label wins
        members = [m for m in members if not (m[0] in seen or seen.add(m[0]))]
        try:
            is_test = make_split_any(split, [m[1] for m in members], [m[3] for m in members],
                                     column_values=[m[4] for m in members], test_fraction=test_fraction, seed=seed)
        except ValueError as exc:
            raise CatalogueError(f"{Path(manifest).name if manifest else 'catalogue'}: {exc}") from None
        if not is_test.any():
            raise CatalogueError("this split leaves no test photos")
        random_split = split in ("identity", "sighting")
        bench = Benchmark(name=name, split_kind=split, config={
            "test_fraction": test_fraction if random_split else None, "seed": seed if random_split else None,
            "source": str(manifest) if manifest else "catalogue",
            "n_images": len(members), "n_test": int(is_test.sum()),
            "n_identities": len({m[1] for m in members}),
            "n_test_identities": len({m[1] for m, t in zip(members, is_test) if t}),
        })
        s.add(bench)
        s.flush()
        for pos, ((image_id, identity, flank, sighting, _), t) in enumerate(zip(members, is_test)):
            s.add(BenchmarkImage(benchmark_id=bench.id, image_id=image_id, position=pos, identity=identity,
                                 flank=flank, sighting=sighting, split="test" if t else "train"))
        s.commit()
        return bench


def get_benchmark(session: Session, name: str) -> Benchmark:
    bench = session.scalar(select(Benchmark).where(Benchmark.name == name))
    if bench is None:
        names = session.scalars(select(Benchmark.name)).all()
        raise CatalogueError(f"no benchmark named {name!r}; existing: {', '.join(names) or '(none) - create one in the Benchmarks tab or with `rosette benchmark create`'}")
    return bench


def list_benchmarks(session: Session) -> list[Benchmark]:
    return list(session.scalars(select(Benchmark).order_by(Benchmark.name)))


def _whole_photo_annotations(s: Session) -> dict[str, int]:
    """{content hash: annotation id} of the photos a manifest row can name: a photo's whole-photo annotation,
    else its only annotation (a photo with several boxes is not one animal, so a manifest row cannot name it)."""
    rows = s.execute(select(Image.content_hash, Image.id, Image.box_source).order_by(Image.id)).all()
    whole = {h: i for h, i, src in rows if src == "whole-photo"}
    counts: dict[str, int] = {}
    only: dict[str, int] = {}
    for h, i, _ in rows:
        counts[h] = counts.get(h, 0) + 1
        only.setdefault(h, i)
    return {**{h: i for h, i in only.items() if counts[h] == 1}, **whole}


def load_benchmark(cat: Catalogue, name: str, *, split: str = "test") -> BenchmarkData:
    """The images of one split (``test``, ``train`` or ``all``) in benchmark order."""
    with cat.unit_of_work() as s:
        bench = get_benchmark(s, name)
        q = (select(BenchmarkImage, Image).join(Image, Image.id == BenchmarkImage.image_id)
             .where(BenchmarkImage.benchmark_id == bench.id).order_by(BenchmarkImage.position))
        if split != "all":
            q = q.where(BenchmarkImage.split == split)
        rows = s.execute(q).all()
        return BenchmarkData(
            name=bench.name, benchmark_id=bench.id,
            image_ids=[r[0].image_id for r in rows], labels=[r[0].identity for r in rows],
            flanks=[r[0].flank for r in rows], sightings=[r[0].sighting for r in rows],
            content_hashes=[pixel_key_of(r[1].content_hash, r[1].box) for r in rows],
        )


def split_counts(data: BenchmarkData) -> dict[str, int]:
    return {"images": len(data), "identities": len(set(data.labels)),
            "left": int(np.sum(np.array(data.flanks) == "left")), "right": int(np.sum(np.array(data.flanks) == "right"))}


def load_benchmark_fit_ids(cat: Catalogue, benchmark: str) -> list[int]:
    """Photos a fitted backbone (sift_vlad) may learn from: a seeded sample (up to 200) of the benchmark's train
    split; for a test-only benchmark, catalogue photos outside its test split. Never its test photos."""
    ids = load_benchmark(cat, benchmark, split="train").image_ids
    if not ids:
        test = set(load_benchmark(cat, benchmark, split="test").image_ids)
        ids = [i for i in all_image_ids(cat) if i not in test]
    rng = np.random.default_rng(0)
    return sorted(rng.choice(ids, size=min(200, len(ids)), replace=False).tolist()) if ids else []
