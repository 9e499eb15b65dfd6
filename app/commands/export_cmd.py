"""``rosette export-kaggle --test-csv test.csv --images DIR --model NAME --out submission.csv``."""

from __future__ import annotations

import json

from app.commands.eval_cmd import progress_printer
from jobs.actions.export import export_kaggle
from jobs.requests.export import KAGGLE_VARIANTS, KaggleExportRequest


def register(sub) -> None:
    p = sub.add_parser("export-kaggle", help="write a Kaggle submission (row_id,similarity) for a test.csv")
    p.add_argument("--test-csv", required=True, help="CSV with row_id,query_image,gallery_image")
    p.add_argument("--images", required=True, help="folder holding the images test.csv names")
    p.add_argument("--model", default=None, help="a backbone or trained model (default: the active model)")
    p.add_argument("--variant", default="full_rgb", choices=list(KAGGLE_VARIANTS),
                   help="foreground_only uses each PNG's alpha channel as the mask")
    p.add_argument("--out", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args, ctx) -> int:
    request = KaggleExportRequest(test_csv=args.test_csv, images_dir=args.images, out=args.out, model=args.model,
                                  variant=args.variant, user=ctx.user)
    res = export_kaggle(ctx.catalogue, request, progress=progress_printer("embedding"))
    print(json.dumps(res) if args.json else res["summary"] + f" (model {res['model']}, {res['seconds_total']:.1f}s)")
    return 0
