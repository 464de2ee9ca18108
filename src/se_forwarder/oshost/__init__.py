"""The host operating system (``oshost``: not the standard library's ``platform``, which this
package once shadowed by name): what differs between Linux and Windows, behind one small interface.

Everything platform-specific the agent and its commands need (default paths, how a service is
asked to stop, where logs go, whether a process is alive) is answered by a ``Platform`` object.
``current()`` picks the one for the running system; tests build either one explicitly, so the
Windows code paths are exercised on Linux too (paths are ``PureWindowsPath`` and nothing here
imports a Windows-only module).

Defaults:

===============  ==================================  ==========================================
                 Linux                               Windows
===============  ==================================  ==========================================
config file      ``/etc/se-forwarder/config.toml``   ``%ProgramData%\\se-forwarder\\config.toml``
state directory  ``/var/lib/se-forwarder``           ``%ProgramData%\\se-forwarder\\state``
logs             stderr (journald under systemd)     ``%ProgramData%\\se-forwarder\\logs\\``
                                                     ``se-forwarder.log`` (service start and
                                                     stop in the Event Log: winservice.py)
stop request     SIGTERM (systemd), SIGINT           CTRL_BREAK_EVENT (SIGBREAK), SIGINT
===============  ==================================  ==========================================

``SE_FORWARDER_CONFIG`` and ``SE_FORWARDER_STATE_DIR`` in the environment override the default
config path and state directory on both platforms.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

SERVICE_NAME = "se-forwarder"
SERVICE_DISPLAY_NAME = "Azure Scheduled Events forwarder"
CONFIG_ENV = "SE_FORWARDER_CONFIG"
STATE_DIR_ENV = "SE_FORWARDER_STATE_DIR"


@dataclass(frozen=True)
class LogDestination:
    """Where the agent's log lines go when it runs as a service.

    ``kind`` is ``"stderr"`` (journald collects it under systemd) or ``"file"``; ``path`` is the
    log file for ``"file"`` (the Windows service writes the agent's output there, and its own start
    and stop to the Application event log).
    """

    kind: str
    path: PurePath | None = None


@dataclass(frozen=True)
class Platform:
    """The base: the behaviour both platforms share. Use ``LinuxPlatform``/``WindowsPlatform``."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    name: str = "base"

    # -- paths --------------------------------------------------------------------------------
    def _path(self, text: str) -> PurePath:
        raise NotImplementedError

    def _default_config_path(self) -> PurePath:
        raise NotImplementedError

    def _default_state_dir(self) -> PurePath:
        raise NotImplementedError

    def default_config_path(self) -> PurePath:
        override = self.environ.get(CONFIG_ENV, "").strip()
        return self._path(override) if override else self._default_config_path()

    def default_state_dir(self) -> PurePath:
        override = self.environ.get(STATE_DIR_ENV, "").strip()
        return self._path(override) if override else self._default_state_dir()

    def local_path(self, path: PurePath) -> Path:
        """A concrete path for this machine (Windows paths are only concrete on Windows; tests on
        Linux map them through their POSIX form)."""
        if isinstance(path, PureWindowsPath) and sys.platform != "win32":
            return Path(path.as_posix())
        return Path(path)

    # -- service behaviour --------------------------------------------------------------------
    def stop_signals(self) -> tuple[int, ...]:
        """Signals the agent treats as "stop cleanly now" (flush, write status, exit 0)."""
        raise NotImplementedError

    def graceful_stop_signal(self) -> int:
        """What a supervisor sends to ask the agent to stop (the agent must handle it)."""
        raise NotImplementedError

    def stop_timeout_seconds(self) -> float:
        """How long a supervisor waits after the stop request before killing the agent.

        Matches ``TimeoutStopSec=`` of the systemd unit and the Windows service's stop wait.
        """
        return 30.0

    def log_destination(self, as_service: bool) -> LogDestination:
        raise NotImplementedError

    def process_alive(self, pid: int) -> bool | None:
        """True/False when known, None when it cannot be determined from here."""
        raise NotImplementedError


@dataclass(frozen=True)
class LinuxPlatform(Platform):
    name: str = "linux"

    def _path(self, text: str) -> PurePath:
        return PurePosixPath(text)

    def _default_config_path(self) -> PurePath:
        return PurePosixPath("/etc/se-forwarder/config.toml")

    def _default_state_dir(self) -> PurePath:
        # systemd's StateDirectory=se-forwarder; with DynamicUser= this is a symlink into
        # /var/lib/private, which readers follow transparently.
        return PurePosixPath("/var/lib/se-forwarder")

    def stop_signals(self) -> tuple[int, ...]:
        return (int(signal.SIGTERM), int(signal.SIGINT))

    def graceful_stop_signal(self) -> int:
        return int(signal.SIGTERM)

    def log_destination(self, as_service: bool) -> LogDestination:
        # Under systemd stdout/stderr go to the journal; nothing to configure.
        return LogDestination(kind="stderr")

    def process_alive(self, pid: int, _kill: Callable[[int, int], None] = os.kill) -> bool | None:
        if pid <= 0:
            return False
        try:
            _kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # exists, owned by another user (e.g. the DynamicUser of the unit)
        except OSError:
            return None
        return True


# Windows console control events (values fixed by the Win32 API); signal.SIGBREAK and
# signal.CTRL_BREAK_EVENT only exist in Python on Windows.
_SIGBREAK = 21
_CTRL_BREAK_EVENT = 1
_STILL_ACTIVE = 259


@dataclass(frozen=True)
class WindowsPlatform(Platform):
    name: str = "windows"

    def _path(self, text: str) -> PurePath:
        return PureWindowsPath(text)

    def _program_data(self) -> PureWindowsPath:
        # Environment variable names are case-insensitive on Windows.
        for key, value in self.environ.items():
            if key.upper() == "PROGRAMDATA" and value.strip():
                return PureWindowsPath(value.strip())
        return PureWindowsPath("C:/ProgramData")

    def data_dir(self) -> PureWindowsPath:
        return self._program_data() / SERVICE_NAME

    def _default_config_path(self) -> PurePath:
        return self.data_dir() / "config.toml"

    def _default_state_dir(self) -> PurePath:
        return self.data_dir() / "state"

    def stop_signals(self) -> tuple[int, ...]:
        # The service wrapper (winservice.py) runs the agent as a child in its own process group
        # and sends CTRL_BREAK_EVENT, which Python delivers as SIGBREAK; Ctrl+C gives SIGINT.
        return (int(getattr(signal, "SIGBREAK", _SIGBREAK)), int(signal.SIGINT))

    def graceful_stop_signal(self) -> int:
        return int(getattr(signal, "CTRL_BREAK_EVENT", _CTRL_BREAK_EVENT))

    def log_destination(self, as_service: bool) -> LogDestination:
        if not as_service:
            return LogDestination(kind="stderr")
        return LogDestination(kind="file", path=self.data_dir() / "logs" / "se-forwarder.log")

    def process_alive(
        self, pid: int, _open_process: Callable[[int], int | None] | None = None
    ) -> bool | None:
        # Never os.kill(pid, 0) here: on Windows os.kill terminates the process.
        if pid <= 0:
            return False
        query = _open_process or _windows_exit_code
        code = query(pid)
        if code is None:
            return None  # no such process or no right to open it: cannot tell
        return code == _STILL_ACTIVE


def _windows_exit_code(pid: int) -> int | None:
    """GetExitCodeProcess of ``pid`` (259 = still running); None if it cannot be opened."""
    if sys.platform == "win32":  # as a block: type-checked on the platform that runs it
        import ctypes
        from ctypes import wintypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        process_query_limited_information = 0x1000
        handle = kernel32.OpenProcess(process_query_limited_information, False, pid)
        if not handle:
            return None
        try:
            code = wintypes.DWORD()
            if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
                return None
            return int(code.value)
        finally:
            kernel32.CloseHandle(handle)
    return None


def for_name(name: str, environ: Mapping[str, str] | None = None) -> Platform:
    env = dict(os.environ) if environ is None else dict(environ)
    if name == "windows":
        return WindowsPlatform(environ=env)
    if name == "linux":
        return LinuxPlatform(environ=env)
    raise ValueError(f"unknown platform {name!r}")


def current(environ: Mapping[str, str] | None = None, sys_platform: str | None = None) -> Platform:
    """The platform this process runs on (anything not Windows is treated like Linux)."""
    plat = sys.platform if sys_platform is None else sys_platform
    return for_name("windows" if plat == "win32" else "linux", environ)


def release_memory() -> None:
    """Give freed heap memory back to the system (glibc's ``malloc_trim``), after a pathological
    answer: an agent on every VM must not keep hundreds of MB it no longer uses. Best effort;
    a no-op where the C library has no such call."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        trim = getattr(libc, "malloc_trim", None)
        if trim is not None:
            trim(0)
    except OSError:
        pass
