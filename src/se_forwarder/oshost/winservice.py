"""se-forwarder as a Windows service (pywin32's service framework). Windows only.

The service process does not run the agent in-process: it starts
``se-forwarder run --config %ProgramData%\\se-forwarder\\config.toml`` as a child in its own
process group and supervises it. Stopping the service sends the child CTRL_BREAK_EVENT (the
agent sees SIGBREAK, see ``oshost.WindowsPlatform.stop_signals``), waits up to
``stop_timeout_seconds()`` while reporting STOP_PENDING to the service control manager, and only
then terminates it. If the agent exits on its own, the service stops with an error so that the
recovery actions set by install.ps1 (restart after 5 s, 10 s, 30 s) apply.

Registered by install.ps1 as::

    sc.exe create se-forwarder ^
        binPath= "<venv>\\Scripts\\python.exe -m se_forwarder.oshost.winservice"

Logs: the agent's stderr goes to ``%ProgramData%\\se-forwarder\\logs\\se-forwarder.log``; service
start/stop and failures go to the Application event log (source ``se-forwarder``).

pywin32 is imported inside functions only, so the supervision logic is testable anywhere.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from se_forwarder import oshost
from se_forwarder.clock import SYSTEM, Clock

# CREATE_NEW_PROCESS_GROUP: CTRL_BREAK_EVENT can target the child alone.
CREATE_NEW_PROCESS_GROUP = 0x00000200
CREATE_NO_WINDOW = 0x08000000


def agent_command(config_path: Any, python_exe: str | None = None) -> list[str]:
    """The child's command line: the se-forwarder console script next to the interpreter, or
    the interpreter running the CLI if the script is missing."""
    exe = Path(python_exe or sys.executable)
    for name in ("se-forwarder.exe", "se-forwarder"):
        script = exe.parent / name
        if script.exists():
            return [str(script), "run", "--config", str(config_path)]
    return [
        str(exe),
        "-c",
        "from se_forwarder.cli import main; raise SystemExit(main())",
        "run",
        "--config",
        str(config_path),
    ]


def stop_child(
    proc: Any,
    send_stop: Callable[[], None],
    timeout: float,
    report_pending: Callable[[float], None] = lambda remaining: None,
    clock: Clock = SYSTEM,
) -> str:
    """Ask the child to stop, wait up to ``timeout``, kill it if needed.

    ``proc`` needs ``poll()`` and ``kill()``/``wait()``. ``report_pending(remaining)`` is called
    about every second (the service reports STOP_PENDING with a wait hint). Returns
    ``"exited"`` (already gone), ``"graceful"`` or ``"killed"``.
    """
    if proc.poll() is not None:
        return "exited"
    with contextlib.suppress(OSError):  # it may have just exited
        send_stop()
    deadline = clock.monotonic() + timeout
    last_report = 0.0
    while proc.poll() is None:
        now = clock.monotonic()
        if now >= deadline:
            proc.kill()
            proc.wait()
            return "killed"
        if now - last_report >= 1.0:
            report_pending(deadline - now)
            last_report = now
        clock.sleep(0.1)
    return "graceful"


class Supervisor:
    """Start the agent child and stop it; the part of the service that is not pywin32."""

    def __init__(
        self, plat: oshost.Platform | None = None, popen: Callable[..., Any] = subprocess.Popen
    ) -> None:
        self.plat = plat or oshost.current()
        self.popen = popen
        self.proc: Any = None
        self._log: Any = None

    def start(self) -> Any:
        config = self.plat.default_config_path()
        dest = self.plat.log_destination(as_service=True)
        stdout: Any = subprocess.DEVNULL
        if dest.kind == "file" and dest.path is not None:
            path = self.plat.local_path(dest.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(path, "ab")  # noqa: SIM115 - the child's stdout, closed in stop()
            stdout = self._log
        flags = CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW if self.plat.name == "windows" else 0
        self.proc = self.popen(
            agent_command(config),
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            creationflags=flags,
        )
        return self.proc

    def stop(self, report_pending: Callable[[float], None] = lambda r: None) -> str:
        if self.proc is None:
            return "exited"
        sig = self.plat.graceful_stop_signal()
        result = stop_child(
            self.proc,
            lambda: self.proc.send_signal(sig),
            self.plat.stop_timeout_seconds(),
            report_pending,
        )
        if self._log is not None:
            self._log.close()
            self._log = None
        return result


def build_service_class() -> type:
    """The pywin32 ServiceFramework subclass (imports pywin32)."""
    import servicemanager
    import win32event
    import win32service
    import win32serviceutil

    # pywin32 has no stubs off Windows: its base class is Any there
    class SeForwarderService(win32serviceutil.ServiceFramework):  # type: ignore[misc]
        _svc_name_ = oshost.SERVICE_NAME
        _svc_display_name_ = oshost.SERVICE_DISPLAY_NAME
        _svc_description_ = (
            "Polls Azure IMDS Scheduled Events once a second and forwards "
            "lifecycle records to Log Analytics / Event Hubs."
        )

        def __init__(self, args: Any) -> None:
            super().__init__(args)
            self.stop_event = win32event.CreateEvent(None, 0, 0, None)
            self.supervisor = Supervisor()
            self.stop_requested = False

        def SvcStop(self) -> None:
            self.stop_requested = True
            self.ReportServiceStatus(
                win32service.SERVICE_STOP_PENDING,
                waitHint=int(self.supervisor.plat.stop_timeout_seconds() * 1000) + 5000,
            )
            win32event.SetEvent(self.stop_event)

        def SvcDoRun(self) -> None:
            servicemanager.LogInfoMsg(f"{self._svc_name_}: starting the agent")
            proc = self.supervisor.start()
            self.ReportServiceStatus(win32service.SERVICE_RUNNING)
            while True:
                rc = win32event.WaitForSingleObject(self.stop_event, 1000)
                if rc == win32event.WAIT_OBJECT_0 or self.stop_requested:
                    break
                if proc.poll() is not None:
                    servicemanager.LogErrorMsg(
                        f"{self._svc_name_}: the agent exited with status {proc.returncode}"
                    )
                    # a non-zero service exit code lets the SCM recovery actions restart us
                    raise SystemExit(1)

            def pending(remaining: float) -> None:
                self.ReportServiceStatus(
                    win32service.SERVICE_STOP_PENDING, waitHint=int(remaining * 1000) + 5000
                )

            how = self.supervisor.stop(pending)
            servicemanager.LogInfoMsg(f"{self._svc_name_}: agent stopped ({how})")

    return SeForwarderService


def main(argv: list[str] | None = None) -> int:
    """``python -m se_forwarder.oshost.winservice`` (started by the SCM), or with pywin32's
    install/remove/start/stop/debug arguments."""
    argv = sys.argv if argv is None else argv
    if sys.platform == "win32":  # as a block: type-checked on the platform that runs it
        return _serve(argv)
    print("se_forwarder.oshost.winservice runs on Windows only", file=sys.stderr)
    return 2


def _serve(argv: list[str]) -> int:
    import servicemanager
    import win32serviceutil

    cls = build_service_class()
    if len(argv) == 1:
        servicemanager.Initialize()
        servicemanager.PrepareToHostSingle(cls)
        servicemanager.StartServiceCtrlDispatcher()
        return 0
    win32serviceutil.HandleCommandLine(cls, argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
