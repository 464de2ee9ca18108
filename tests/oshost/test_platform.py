"""Platform-specific paths and service behaviour (both platforms tested on Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest

from se_forwarder import oshost as plat
from se_forwarder.oshost import winservice


def test_current_picks_by_sys_platform():
    assert isinstance(plat.current(environ={}, sys_platform="linux"), plat.LinuxPlatform)
    assert isinstance(plat.current(environ={}, sys_platform="win32"), plat.WindowsPlatform)
    assert isinstance(plat.current(environ={}, sys_platform="darwin"), plat.LinuxPlatform)
    with pytest.raises(ValueError):
        plat.for_name("solaris", {})


def test_linux_defaults():
    p = plat.LinuxPlatform(environ={})
    assert p.default_config_path() == PurePosixPath("/etc/se-forwarder/config.toml")
    assert p.default_state_dir() == PurePosixPath("/var/lib/se-forwarder")
    assert p.stop_signals() == (signal.SIGTERM, signal.SIGINT)
    assert p.graceful_stop_signal() == signal.SIGTERM
    assert p.log_destination(as_service=True).kind == "stderr"


def test_windows_defaults_use_programdata():
    p = plat.WindowsPlatform(environ={"ProgramData": r"D:\PD", "ProgramFiles": r"D:\PF"})
    assert p.default_config_path() == PureWindowsPath(r"D:\PD\se-forwarder\config.toml")
    assert p.default_state_dir() == PureWindowsPath(r"D:\PD\se-forwarder\state")


def test_windows_env_names_case_insensitive_and_fallback():
    assert plat.WindowsPlatform(
        environ={"PROGRAMDATA": r"E:\Data"}
    ).default_state_dir() == PureWindowsPath(r"E:\Data\se-forwarder\state")
    assert plat.WindowsPlatform(environ={}).default_config_path() == PureWindowsPath(
        r"C:\ProgramData\se-forwarder\config.toml"
    )


@pytest.mark.parametrize(
    "cls,path", [(plat.LinuxPlatform, "/srv/se"), (plat.WindowsPlatform, r"F:\se")]
)
def test_environment_overrides(cls, path):
    p = cls(environ={"SE_FORWARDER_STATE_DIR": path, "SE_FORWARDER_CONFIG": path + "/c.toml"})
    assert str(p.default_state_dir()) == str(p._path(path))
    assert str(p.default_config_path()) == str(p._path(path + "/c.toml"))


def test_windows_stop_is_ctrl_break_and_sigbreak():
    p = plat.WindowsPlatform(environ={})
    # CTRL_BREAK_EVENT == 1 and SIGBREAK == 21 on Windows (fixed by the Win32 API/CRT)
    assert p.graceful_stop_signal() == 1
    assert p.stop_signals() == (21, signal.SIGINT)
    assert p.stop_timeout_seconds() == plat.LinuxPlatform(environ={}).stop_timeout_seconds()


def test_windows_service_logs_to_programdata_file(tmp_path):
    p = plat.WindowsPlatform(environ={"ProgramData": str(tmp_path)})
    dest = p.log_destination(as_service=True)
    assert dest.kind == "file"
    assert (
        dest.path == PureWindowsPath(str(tmp_path)) / "se-forwarder" / "logs" / "se-forwarder.log"
    )
    assert p.log_destination(as_service=False).kind == "stderr"


def test_linux_process_alive():
    p = plat.LinuxPlatform(environ={})
    assert p.process_alive(os.getpid()) is True
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.process_alive(int(done.stdout)) is False
    assert p.process_alive(0) is False

    def eperm(pid, sig):
        raise PermissionError

    assert p.process_alive(1234, _kill=eperm) is True


def test_windows_process_alive_never_kills():
    p = plat.WindowsPlatform(environ={})
    assert p.process_alive(42, _open_process=lambda pid: 259) is True  # STILL_ACTIVE
    assert p.process_alive(42, _open_process=lambda pid: 0) is False  # exited with 0
    assert p.process_alive(42, _open_process=lambda pid: None) is None
    # without the Win32 API (not on Windows) the answer is "unknown", and nothing is signalled
    if sys.platform != "win32":
        assert p.process_alive(os.getpid()) is None


# -- the Windows service wrapper (its supervision logic; pywin32 replaced by fakes) ------------


@pytest.mark.process
def test_agent_command_prefers_console_script(tmp_path):
    py = tmp_path / "python.exe"
    py.touch()
    cfg = PureWindowsPath(r"C:\ProgramData\se-forwarder\config.toml")
    cmd = winservice.agent_command(cfg, str(py))
    assert cmd[0] == str(tmp_path / "python.exe")  # no script yet: the interpreter runs the CLI
    assert cmd[-3:] == ["run", "--config", str(cfg)] and "se_forwarder.cli" in cmd[2]
    (tmp_path / "se-forwarder.exe").touch()
    assert winservice.agent_command(cfg, str(py)) == [
        str(tmp_path / "se-forwarder.exe"),
        "run",
        "--config",
        str(cfg),
    ]


CHILD = """
import signal, sys, time
mode = sys.argv[1]
def stop(*a):
    print("term", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop if mode == "graceful" else signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # whatever mask it inherited
print("ready", flush=True)
time.sleep(120)
"""


def _child(mode):
    p = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_stop_child_graceful_and_killed():
    p = _child("graceful")
    pending = []
    # the wait ends when the child does: the long grace only matters on a starved machine
    outcome = winservice.stop_child(p, lambda: p.send_signal(signal.SIGTERM), 60, pending.append)
    assert outcome == "graceful", f"child printed {p.stdout.read()!r} after ready"
    assert p.returncode == 0 and p.stdout.read() == "term\n"

    p = _child("stubborn")
    pending.clear()
    t0 = time.monotonic()
    assert (
        winservice.stop_child(p, lambda: p.send_signal(signal.SIGTERM), 1.5, pending.append)
        == "killed"
    )
    assert 1.4 <= time.monotonic() - t0 < 10 and p.returncode == -signal.SIGKILL
    assert pending and all(r <= 1.5 for r in pending)  # STOP_PENDING hints were reported
    assert winservice.stop_child(p, lambda: None, 1) == "exited"


class FakeProc:
    def __init__(self, *a, **kw):
        self.args, self.kwargs = a, kw
        self.signals = []
        self.returncode = None

    def poll(self):
        return self.returncode

    def send_signal(self, sig):
        self.signals.append(sig)
        self.returncode = 0

    def kill(self):
        self.returncode = -9

    def wait(self):
        return self.returncode


def test_supervisor_windows_child_in_own_group_logging_to_programdata(tmp_path):
    made = []

    def popen(*a, **kw):
        made.append(FakeProc(*a, **kw))
        return made[-1]

    plat_w = plat.WindowsPlatform(environ={"ProgramData": str(tmp_path)})
    sup = winservice.Supervisor(plat_w, popen=popen)
    proc = sup.start()
    argv = proc.args[0]
    assert argv[-3:] == ["run", "--config", str(plat_w.default_config_path())]
    assert proc.kwargs["creationflags"] & winservice.CREATE_NEW_PROCESS_GROUP
    log = tmp_path / "se-forwarder" / "logs" / "se-forwarder.log"
    assert Path(proc.kwargs["stdout"].name) == log and log.exists()
    assert sup.stop() == "graceful"
    assert proc.signals == [1]  # CTRL_BREAK_EVENT
    assert proc.kwargs["stdout"].closed


def test_service_class_with_fake_pywin32(monkeypatch):
    reports = []
    logs = []

    class Framework:
        def __init__(self, args):
            self.args = args

        def ReportServiceStatus(self, status, waitHint=0):
            reports.append((status, waitHint))

    events = {}

    def create_event(*a):
        ev = threading.Event()
        events["stop"] = ev
        return ev

    fakes = {
        "win32serviceutil": types.SimpleNamespace(ServiceFramework=Framework),
        "win32service": types.SimpleNamespace(SERVICE_STOP_PENDING=3, SERVICE_RUNNING=4),
        "win32event": types.SimpleNamespace(
            CreateEvent=create_event,
            SetEvent=lambda ev: ev.set(),
            WAIT_OBJECT_0=0,
            WaitForSingleObject=lambda ev, ms: 0 if ev.wait(ms / 1000) else 258,
        ),
        "servicemanager": types.SimpleNamespace(LogInfoMsg=logs.append, LogErrorMsg=logs.append),
    }
    for name, mod in fakes.items():
        monkeypatch.setitem(sys.modules, name, mod)
    cls = winservice.build_service_class()
    assert cls._svc_name_ == "se-forwarder"
    svc = cls(["se-forwarder"])
    made = []
    svc.supervisor = winservice.Supervisor(
        plat.WindowsPlatform(environ={"ProgramData": "/nonexistent-not-used"}),
        popen=lambda *a, **kw: made.append(FakeProc(*a, **kw)) or made[-1],
    )
    svc.supervisor.plat = types.SimpleNamespace(  # logs to stderr: nothing written anywhere
        name="windows",
        default_config_path=lambda: "cfg",
        log_destination=lambda as_service: plat.LogDestination(kind="stderr"),
        graceful_stop_signal=lambda: 1,
        stop_timeout_seconds=lambda: 30.0,
    )
    runner = threading.Thread(target=svc.SvcDoRun)
    runner.start()
    deadline = time.monotonic() + 5
    while not made and time.monotonic() < deadline:
        time.sleep(0.01)
    assert made and (4, 0) in reports  # SERVICE_RUNNING after the child started
    svc.SvcStop()
    runner.join(5)
    assert not runner.is_alive()
    assert (3, 35000) in reports  # STOP_PENDING with the stop timeout as wait hint
    assert made[0].signals == [1]
    assert any("stopped (graceful)" in m for m in logs)


def test_service_fails_when_agent_dies(monkeypatch):
    class Framework:
        def __init__(self, args):
            pass

        def ReportServiceStatus(self, status, waitHint=0):
            pass

    logs = []
    fakes = {
        "win32serviceutil": types.SimpleNamespace(ServiceFramework=Framework),
        "win32service": types.SimpleNamespace(SERVICE_STOP_PENDING=3, SERVICE_RUNNING=4),
        "win32event": types.SimpleNamespace(
            CreateEvent=lambda *a: threading.Event(),
            SetEvent=lambda ev: ev.set(),
            WAIT_OBJECT_0=0,
            WaitForSingleObject=lambda ev, ms: 258,
        ),
        "servicemanager": types.SimpleNamespace(LogInfoMsg=logs.append, LogErrorMsg=logs.append),
    }
    for name, mod in fakes.items():
        monkeypatch.setitem(sys.modules, name, mod)
    svc = winservice.build_service_class()(["x"])
    dead = FakeProc()
    dead.returncode = 3
    svc.supervisor.start = lambda: dead
    with pytest.raises(SystemExit) as exc:
        svc.SvcDoRun()
    assert exc.value.code == 1 and any("exited with status 3" in m for m in logs)


def test_winservice_main_refuses_off_windows():
    if sys.platform == "win32":
        pytest.skip("Windows: main() would register with the SCM")  # never on the Linux CI
    assert winservice.main(["x"]) == 2


def test_local_path_maps_windows_paths_on_this_machine(tmp_path):
    w = plat.WindowsPlatform(environ={"ProgramData": str(tmp_path)})
    local = w.local_path(w.default_state_dir())
    if sys.platform != "win32":
        assert local == tmp_path / "se-forwarder" / "state"
    assert plat.LinuxPlatform(environ={}).local_path(PurePosixPath("/a/b")) == Path("/a/b")
