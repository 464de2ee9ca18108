#!/usr/bin/env python3
"""Write infra/cloud-init/install.sh.gz: install.sh compressed for the cloud-init payload.

customData is limited to 64 KB of base64, and the Bicep expression that fills the cloud-init
template carries the installer: gzip (cloud-init's ``encoding: gz+b64``) makes both about a
third of the plain base64. Bicep cannot compress, so the compressed file is committed next to the
template; run this after every change to install.sh (tests/infra/test_cloud_init.py fails while the
two differ).

    python3 infra/scripts/pack-installer.py
"""

from __future__ import annotations

import gzip
from pathlib import Path

INFRA = Path(__file__).resolve().parents[1]
SOURCE = INFRA / "scripts" / "install.sh"
TARGET = INFRA / "cloud-init" / "install.sh.gz"


def main() -> int:
    data = gzip.compress(SOURCE.read_bytes(), compresslevel=9, mtime=0)
    TARGET.write_bytes(data)
    print(
        f"{TARGET.relative_to(INFRA.parent)}: {len(data)} bytes "
        f"({SOURCE.stat().st_size} uncompressed)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
