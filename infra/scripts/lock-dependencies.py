#!/usr/bin/env python3
"""Write the dependency lock of a se-forwarder wheel: every package pip would install with it,
pinned (==) with the sha256 of the file pip chose, and the wheel's own sha256.

    python3 infra/scripts/lock-dependencies.py dist/se_forwarder-0.1.0-py3-none-any.whl \\
        --extras azure -o dist/se_forwarder-0.1.0.lock

install.sh --lock (and install.ps1 -Lock) install from it in pip's hash-checking mode: a file
whose hash is not in the lock, a dependency the lock does not pin, or a wheel that is not the one
locked is refused. Run it on a machine like the VMs (same Python minor version, OS and
architecture: some dependencies ship one wheel per platform), or give pip the target, e.g.
``--pip-arg=--python-version=3.11 --pip-arg=--platform=manylinux_2_17_x86_64
--pip-arg=--only-binary=:all:``. Dependencies come from pip's configured index (or
``--pip-arg=--index-url=...``). Windows: add ``--also pywin32==<version>`` and run it on Windows.

Standard library only; uses ``pip install --dry-run --report`` (pip 22.2 or newer).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve(wheel: Path, extras: str, also: list[str], pip_args: list[str]) -> list[dict]:
    """What pip would install with the wheel, as its --report lists it."""
    spec = f"se-forwarder{extras} @ {wheel.resolve().as_uri()}"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--disable-pip-version-check",
        "--report",
        "-",
        *pip_args,
        spec,
        *also,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"pip could not resolve {spec}:\n{r.stderr.strip()}")
    return json.loads(r.stdout)["install"]


def lock_lines(wheel: Path, items: list[dict]) -> list[str]:
    out = []
    for item in items:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if norm(name) == "se-forwarder":
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        else:
            hashes = item["download_info"].get("archive_info", {}).get("hashes", {})
            digest = hashes.get("sha256")
            if not digest:
                raise SystemExit(
                    f"{name} {version}: the index gave no sha256 for "
                    f"{item['download_info'].get('url')}"
                )
        out.append(f"{norm(name)}=={version} --hash=sha256:{digest}")
    return sorted(out, key=lambda line: (not line.startswith("se-forwarder=="), line))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("wheel", type=Path, help="the se-forwarder wheel to lock")
    ap.add_argument("--extras", default="azure", help='extras to lock, default "azure"; "none"')
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="REQ",
        help="another requirement to lock with it (e.g. pywin32==311 on Windows)",
    )
    ap.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an option passed to pip (target platform, index)",
    )
    ap.add_argument("-o", "--output", type=Path, help="write here instead of standard output")
    args = ap.parse_args(argv)
    if not args.wheel.is_file() or args.wheel.suffix != ".whl":
        ap.error(f"{args.wheel}: not a wheel file")
    extras = "" if args.extras in ("", "none") else f"[{args.extras}]"
    lines = lock_lines(args.wheel, resolve(args.wheel, extras, args.also, args.pip_arg))
    text = (
        f"# se-forwarder dependency lock for {args.wheel.name} (extras: "
        f"{args.extras or 'none'}); written by infra/scripts/lock-dependencies.py.\n"
        "# Install with install.sh --lock / install.ps1 -Lock (pip --require-hashes).\n"
        + "\n".join(lines)
        + "\n"
    )
    if args.output:
        args.output.write_text(text, "utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
