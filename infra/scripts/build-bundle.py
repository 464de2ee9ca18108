#!/usr/bin/env python3
"""Build the offline bundle of a se-forwarder wheel: every wheel the agent needs, for every
supported Python version and architecture, and one hash-pinned lock per target, in one
.tar.gz that install.sh installs with no package index at all.

    python3 infra/scripts/build-bundle.py dist/se_forwarder-0.1.0-py3-none-any.whl \\
        --extras azure,webhook -o dist/se-forwarder-0.1.0-bundle.tar.gz
    sha256sum dist/se-forwarder-0.1.0-bundle.tar.gz      # the deployment's packageSha256

Targets (default): CPython 3.11, 3.12 and 3.13 on x86_64 and aarch64, glibc 2.34 or newer
(manylinux 2014 up to 2_34: RHEL 9, Debian 12, Ubuntu 24.04, Azure Linux 3). For each, pip
downloads the wheels (``pip download --only-binary=:all: --platform ... --python-version ...``,
from pip's configured index: PyPI or your mirror) and the lock pins each with the sha256 of the
file taken. A dependency that resolves to another version on one target (no wheel of the newest
for it) stops the build: pip would otherwise fall back, silently, to an old version.
``--current`` builds for this interpreter and machine only (tests, a fleet of one kind).

Layout: bundle.json (version, extras, targets), wheels/*.whl, requirements/<target>.txt,
SHA256SUMS. Standard library only; pip 22.2 or newer.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PYTHONS = ("3.11", "3.12", "3.13")
ARCHES = ("x86_64", "aarch64")
GLIBC_MAX = 34  # manylinux_2_17 (manylinux2014) to manylinux_2_34: RHEL 9's glibc and newer
WHEEL = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def platforms(arch: str) -> list[str]:
    """pip matches --platform tags exactly (no older manylinux implied): list them all."""
    return [f"manylinux2014_{arch}"] + [f"manylinux_2_{v}_{arch}" for v in range(17, GLIBC_MAX + 1)]


def current_target() -> str:
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    return f"cp{sys.version_info[0]}{sys.version_info[1]}-{machine}"


def download(spec: str, dest: Path, target: str | None, pip_args: list[str]) -> None:
    """The wheels pip would install for ``spec`` on ``target`` (None: this interpreter)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--only-binary=:all:",
        "--quiet",
        "--disable-pip-version-check",
        "-d",
        str(dest),
        *pip_args,
    ]
    if target is not None:
        version, arch = target.split("-")
        cmd += [
            "--implementation",
            "cp",
            "--python-version",
            f"{version[2]}.{version[3:]}",
            "--abi",
            version,
        ]
        for tag in platforms(arch):
            cmd += ["--platform", tag]
    r = subprocess.run([*cmd, spec], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(
            f"pip could not download {spec} for {target or current_target()}:\n{r.stderr.strip()}"
        )


def lock(files: list[Path]) -> tuple[list[str], dict[str, str]]:
    """Requirement lines pinning each wheel with its sha256 (se-forwarder first), and the
    version of each package."""
    lines, versions = [], {}
    for f in files:
        m = WHEEL.match(f.name)
        if not m:
            raise SystemExit(f"{f.name}: not a wheel")
        name, version = norm(m.group("name")), m.group("version")
        versions[name] = version
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        lines.append(f"{name}=={version} --hash=sha256:{digest}")
    return sorted(lines, key=lambda line: (not line.startswith("se-forwarder=="), line)), versions


def build(
    wheel: Path, extras: list[str], targets: list[str | None], pip_args: list[str], work: Path
) -> dict:
    """Downloads into work/wheels and writes work/requirements/*.txt; the manifest."""
    m = WHEEL.match(wheel.name)
    if not m or norm(m.group("name")) != "se-forwarder":
        raise SystemExit(f"{wheel.name} is not a se-forwarder wheel")
    spec = (
        f"se-forwarder{'[' + ','.join(extras) + ']' if extras else ''} @ {wheel.resolve().as_uri()}"
    )
    (work / "wheels").mkdir()
    (work / "requirements").mkdir()
    manifest = {
        "format": 1,
        "name": "se-forwarder",
        "version": m.group("version"),
        "extras": extras,
        "targets": {},
    }
    all_versions: dict[str, dict[str, str]] = {}
    for target in targets:
        name = target or current_target()
        with tempfile.TemporaryDirectory() as tmp:
            download(spec, Path(tmp), target, pip_args)
            files = sorted(Path(tmp).glob("*.whl"))
            lines, versions = lock(files)
            for f in files:
                if not (work / "wheels" / f.name).exists():
                    shutil.copy2(f, work / "wheels" / f.name)
        (work / "requirements" / f"{name}.txt").write_text("\n".join(lines) + "\n", "utf-8")
        manifest["targets"][name] = f"requirements/{name}.txt"
        all_versions[name] = versions
        print(f"{name}: {len(lines)} wheels", file=sys.stderr)
    skew = version_skew(all_versions)
    if skew:
        raise SystemExit(
            "these resolve to other versions on some targets (a wheel missing for "
            "one, so pip fell back): " + "; ".join(skew)
        )
    return manifest


def version_skew(all_versions: dict[str, dict[str, str]]) -> list[str]:
    out = []
    names = {n for v in all_versions.values() for n in v}
    for n in sorted(names):
        seen = {t: v[n] for t, v in all_versions.items() if n in v}
        if len(set(seen.values())) > 1:
            out.append(f"{n} " + ", ".join(f"{t} {v}" for t, v in sorted(seen.items())))
    return out


def write_tar(work: Path, manifest: dict, out: Path) -> None:
    """A reproducible .tar.gz: sorted entries, no owner, no time."""
    (work / "bundle.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    files = sorted(p for p in work.rglob("*") if p.is_file())
    sums = "".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(work)}\n" for p in files
    )
    (work / "SHA256SUMS").write_text(sums)
    files.append(work / "SHA256SUMS")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(files):
            info = tarfile.TarInfo(str(p.relative_to(work)))
            data = p.read_bytes()
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    out.write_bytes(buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("wheel", type=Path, help="the se-forwarder wheel")
    ap.add_argument(
        "--extras",
        default="azure,webhook",
        help='extras the fleet may use (default "azure,webhook"); "none" for none',
    )
    ap.add_argument(
        "--python-version",
        action="append",
        metavar="X.Y",
        help=f"a CPython version to bundle for (repeatable; default {', '.join(PYTHONS)})",
    )
    ap.add_argument(
        "--arch",
        action="append",
        choices=ARCHES,
        help=f"an architecture (repeatable; default {', '.join(ARCHES)})",
    )
    ap.add_argument(
        "--current",
        action="store_true",
        help="only this interpreter and machine (no --platform given to pip)",
    )
    ap.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an option passed to pip download (an index, a mirror)",
    )
    ap.add_argument(
        "-o", "--output", type=Path, help="default se-forwarder-<version>-bundle.tar.gz"
    )
    args = ap.parse_args(argv)
    if not args.wheel.is_file():
        ap.error(f"{args.wheel}: no such wheel")
    extras = (
        [] if args.extras in ("", "none") else sorted(e.strip() for e in args.extras.split(","))
    )
    if args.current:
        targets: list[str | None] = [None]
    else:
        targets = [
            f"cp{v.replace('.', '')}-{a}"
            for v in (args.python_version or PYTHONS)
            for a in (args.arch or ARCHES)
        ]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        manifest = build(args.wheel, extras, targets, args.pip_arg, work)
        out = args.output or Path(f"se-forwarder-{manifest['version']}-bundle.tar.gz")
        write_tar(work, manifest, out)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    print(f"{out}: {', '.join(manifest['targets'])}; sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
