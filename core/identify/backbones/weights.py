"""Pretrained weights on this machine, never downloaded: where each backbone's files are looked for, and the
message that says where to put them when they are missing.

Order: ``weights_path=`` (a file, or a folder holding the repo files); ``$ROSETTE_WEIGHTS_DIR/<owner>/<repo>/``
(also ``<owner>--<repo>/`` and ``<repo>/``); the Hugging Face cache via
``huggingface_hub.try_to_load_from_cache`` (a pure file lookup, no network).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _weights_root() -> Path | None:
    root = os.environ.get("ROSETTE_WEIGHTS_DIR")
    return Path(root).expanduser() if root else None


def _candidate_dirs(repo_id: str | None, extra_dirs: Sequence[str] = ()) -> list[Path]:
    root = _weights_root()
    if root is None:
        return []
    names: list[str] = []
    if repo_id:
        names += [repo_id, repo_id.replace("/", "--"), repo_id.split("/")[-1]]
    names += list(extra_dirs)
    out: list[Path] = []
    for n in names:
        d = root / n
        if d not in out:
            out.append(d)
    return out


def find_local_file(repo_id: str | None, filenames: Sequence[str], *,
                    weights_path: str | os.PathLike[str] | None = None,
                    extra_dirs: Sequence[str] = ()) -> Path | None:
    """First of ``filenames`` found locally for ``repo_id`` (see the module docstring for the order), or None."""
    if weights_path is not None:
        p = Path(weights_path).expanduser()
        if p.is_file():
            return p
        if p.is_dir():
            for name in filenames:
                if (p / name).is_file():
                    return p / name
        return None
    for d in _candidate_dirs(repo_id, extra_dirs):
        for name in filenames:
            if (d / name).is_file():
                return d / name
    if repo_id:
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:  # pragma: no cover - huggingface_hub is a dependency
            return None
        for name in filenames:
            try:
                hit = try_to_load_from_cache(repo_id, name)
            except Exception:  # malformed repo id or cache: treat as not cached
                hit = None
            if isinstance(hit, str) and os.path.isfile(hit):
                return Path(hit)
    return None


def find_local_config(repo_id: str, *, weights_path: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The repo's ``config.json`` if it is on this machine (next to ``weights_path`` or as for weights)."""
    path: Path | None = None
    if weights_path is not None:
        p = Path(weights_path).expanduser()
        folder = p if p.is_dir() else p.parent
        if (folder / "config.json").is_file():
            path = folder / "config.json"
    if path is None:
        path = find_local_file(repo_id, ("config.json",))
    if path is None:
        return None
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def weights_help(what: str, *, repo_id: str | None, files: Sequence[str], env_dirs: Sequence[str]) -> str:
    """The message shown when weights are missing: which repo, where to put files, offline flags."""
    root = os.environ.get("ROSETTE_WEIGHTS_DIR") or "<ROSETTE_WEIGHTS_DIR>"
    lines = [f"no pretrained weights for {what} on this machine (Rosette never downloads weights by itself)."]
    lines.append("Provide them in one of these ways:")
    if repo_id:
        lines.append(f"  - with internet: `huggingface-cli download {repo_id}` (fills the Hugging Face cache, "
                     f"~/.cache/huggingface/hub or $HF_HOME/hub), then run with HF_HUB_OFFLINE=1;")
        lines.append(f"  - or copy the repo files ({', '.join(files)}) to {root}/{repo_id}/ "
                     f"(`huggingface-cli download {repo_id} --local-dir {root}/{repo_id}`) and set ROSETTE_WEIGHTS_DIR;")
    for d in env_dirs:
        lines.append(f"  - or put the weight file in {root}/{d}/;")
    lines.append("  - or pass weights_path=<file or folder> when creating the backbone;")
    lines.append("  - or use pretrained=False for random weights (tests only: the scores are meaningless).")
    return "\n".join(lines)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, streamed (``hashlib.file_digest``)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
