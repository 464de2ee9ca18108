"""``signals.wait_for_stop``: the helper commands' main loop (simulate, the stand-ins)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM to oneself: POSIX")


def test_a_stop_sent_as_soon_as_the_command_says_it_is_ready_ends_it_cleanly():
    """What announces readiness (a stand-in's address) runs once the stop signals are caught: a
    SIGTERM sent the moment it is read is a clean stop (exit 0), not the signal's default."""
    code = (
        "import os, signal\n"
        "from se_forwarder.oshost import signals\n"
        "signals.wait_for_stop(ready=lambda: os.kill(os.getpid(), signal.SIGTERM))\n"
        "print('stopped')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "stopped"), done.stderr
