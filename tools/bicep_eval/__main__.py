"""``python -m bicep_eval FILE_OR_DIR...``: every check of ``check_file`` on each Bicep file, then
the resources the type data could not check, by provider (so a pass says what it did not
cover). Exit 1 on a problem."""

from __future__ import annotations

import sys
from pathlib import Path

from .checks import check_file, untyped


def main(argv: list[str]) -> int:
    paths = sorted(
        {p for a in argv for p in (Path(a).rglob("*.bicep") if Path(a).is_dir() else [Path(a)])}
    )
    problems = [p for path in paths for p in check_file(path)]
    print("\n".join(problems) if problems else f"{len(paths)} file(s): no problem found")
    for prov, where in untyped(paths).items():
        print(f"not type-checked (no type data for {prov}): {len(where)} resource(s)")
        print("".join(f"  {w}\n" for w in where), end="")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
