"""What the agent's process leaves out of its memory: it runs on every VM of a fleet.

pydantic imports ``secrets`` for its secret types, whose ``hmac`` and ``hashlib`` load OpenSSL's
libcrypto through ``_hashlib``: 3.4 MB of resident memory for an agent that hashes nothing but
an oversized document's RecordId (bench/README.md, "Memory"). Imported first with ``_hashlib``
out of reach, both take Python's own implementations of the same digests (the documented
fallback where Python is built without OpenSSL) and give the same results; a sink that needs
TLS still loads OpenSSL through ``ssl``. Left as it is where the host runs in FIPS mode, where
the digests must be OpenSSL's.
"""

from __future__ import annotations

import sys
from pathlib import Path

FIPS_FLAG = Path("/proc/sys/crypto/fips_enabled")


def builtin_digests() -> bool:
    """Import ``hashlib`` and ``hmac`` on Python's own digests, unless they are already imported
    or the host is in FIPS mode; True when they were."""
    if "hashlib" in sys.modules or "hmac" in sys.modules or _fips():
        return False
    sys.modules["_hashlib"] = None  # type: ignore[assignment]  # an import of it fails
    try:
        import hashlib  # noqa: F401
        import hmac  # noqa: F401
    finally:
        del sys.modules["_hashlib"]
    return True


def _fips() -> bool:
    try:
        return FIPS_FLAG.read_text().strip() == "1"
    except OSError:
        return False
