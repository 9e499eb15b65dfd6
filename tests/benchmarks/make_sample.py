"""Write a downsized nyala sample (the first N animals) to carry to the lent GPU machine.

    python tests/benchmarks/make_sample.py ../shared/data/nyala gpu-carry/nyala 60
"""

from __future__ import annotations

import csv
import shutil
import sys
from pathlib import Path


def main(src: str, dest: str, n_animals: str = "60") -> int:
    src_dir, dest_dir = Path(src), Path(dest)
    rows = list(csv.DictReader(open(src_dir / "manifest.csv", newline="")))
    keep_ids = sorted({r["identity"] for r in rows})[:int(n_animals)]
    keep = [r for r in rows if r["identity"] in keep_ids]
    (dest_dir / "images").mkdir(parents=True, exist_ok=True)
    for r in keep:
        shutil.copy(src_dir / "images" / r["filename"], dest_dir / "images" / r["filename"])
    with open(dest_dir / "manifest.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep)
    print(f"{len(keep)} photos of {len(keep_ids)} animals in {dest_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
