"""``rosette mask [--masker sam2|grabcut] [--only-missing|--all]``: resumable batch masking."""

from __future__ import annotations

import json

from app.commands.eval_cmd import progress_printer
from jobs.actions.masks import MaskPhotosRequest, mask_photos


def register(sub) -> None:
    p = sub.add_parser("mask", help="mask the animal in catalogue photos (resumable batch)")
    p.add_argument("--masker", default=None, help="sam2 | grabcut | alpha (default: sam2 when a checkpoint is configured, else grabcut)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--only-missing", dest="only_missing", action="store_true", default=True,
                   help="only photos without a mask (default)")
    g.add_argument("--all", dest="only_missing", action="store_false", help="re-mask every photo")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args, ctx) -> int:
    request = MaskPhotosRequest(masker=args.masker, only_missing=args.only_missing, user=ctx.user)
    res = mask_photos(ctx.catalogue, request, progress=progress_printer("masking"))
    if args.json:
        print(json.dumps(res))
    else:
        print(res["summary"])
        for err in res["errors"][:20]:
            print(f"  image {err['image_id']}: {err['error']}")
    return 0 if not res["errors"] or res["masked"] else 1
