"""``python -m benchmarks AREA PART [options]``: one area's part (see the package's docs)."""

from __future__ import annotations

import importlib
import sys

from benchmarks.common import AREAS, area_parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in AREAS:
        listing = ", ".join(AREAS)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"error: no benchmark area {argv[0]!r}; the areas: {listing}", file=sys.stderr)
            return 2
        print(f"usage: python -m benchmarks AREA PART [options]; the areas: {listing}")
        return 0
    module = importlib.import_module(f"benchmarks.{argv[0]}")
    args = area_parser(argv[0], module).parse_args(argv[1:])
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
