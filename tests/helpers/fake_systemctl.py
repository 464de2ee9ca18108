"""A stand-in for systemctl, enough of it for install.sh and its units (se-forwarder.service and
se-forwarder-collector.service, each with its own pid file).

systemd is not PID 1 where the tests run. This starts the unit's ExecStart= as a background
process the way systemd would for this unit: its Environment=, WorkingDirectory= and UMask=; as
root, DynamicUser=yes as an unprivileged user (nobody) that owns the state directory
(StateDirectory=) and nothing else; LoadCredential= (drop-ins included) copied by root into a
directory only that user can read, named in $CREDENTIALS_DIRECTORY. It stops with KillSignal=
waiting TimeoutStopSec=. The sandboxing directives themselves are checked in test_systemd.py.

Run as ``python fake_systemctl.py COMMAND [UNIT]`` with FAKE_UNIT_DIR and FAKE_RUN_DIR set.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

UNIT_DIR = Path(os.environ["FAKE_UNIT_DIR"])
RUN = Path(os.environ["FAKE_RUN_DIR"])
# the unit the command names (`systemctl restart UNIT`), the agent's when none
UNIT = next((a for a in sys.argv[2:] if not a.startswith("-")), "se-forwarder.service")


def pidfile() -> Path:
    """agent.pid for the agent's unit (what the tests read), <unit>.pid for another."""
    return RUN / ("agent.pid" if UNIT == "se-forwarder.service" else f"{UNIT}.pid")


def unit() -> dict[str, list[str]]:
    """The unit's directives, its drop-ins' appended (as systemd merges them)."""
    out: dict[str, list[str]] = {}
    files = [UNIT_DIR / UNIT]
    files += sorted((UNIT_DIR / f"{UNIT}.d").glob("*.conf"))
    for f in files:
        for raw in f.read_text().splitlines():
            line = raw.strip()
            if line and not line.startswith(("#", "[")) and "=" in line:
                k, v = line.split("=", 1)
                out.setdefault(k, []).append(v)
    return out


def seconds(v: str) -> float:
    return float(v.rstrip("s"))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def current_pid() -> int | None:
    try:
        pid = int(pidfile().read_text())
    except (FileNotFoundError, ValueError):
        return None
    return pid if alive(pid) else None


def stop() -> None:
    pid = current_pid()
    if pid is None:
        return
    u = unit()
    os.kill(pid, getattr(signal, u.get("KillSignal", ["SIGTERM"])[0]))
    limit = seconds(u.get("TimeoutStopSec", ["90"])[0])
    t0 = time.monotonic()
    while alive(pid) and time.monotonic() - t0 < limit:
        time.sleep(0.05)
    with open(RUN / "stops.log", "a") as f:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            f.write(f"killed {pid}\n")
        else:
            f.write(f"graceful {pid} {time.monotonic() - t0:.2f}\n")
    pidfile().unlink()


def dynamic_user(u: dict[str, list[str]]) -> pwd.struct_passwd | None:
    """DynamicUser=yes: an unprivileged user of its own. Only root can switch to one."""
    if u.get("DynamicUser", ["no"])[-1] != "yes" or os.geteuid() != 0:
        return None
    return pwd.getpwnam("nobody")


def chown_tree(path: Path, user: pwd.struct_passwd) -> None:
    for p in [path, *path.rglob("*")]:
        os.lchown(p, user.pw_uid, user.pw_gid)


def credentials(u: dict[str, list[str]], user: pwd.struct_passwd | None) -> Path | None:
    """LoadCredential=ID:PATH: systemd reads PATH as root and gives the service a copy."""
    items = [v.split(":", 1) for v in u.get("LoadCredential", [])]
    if not items:
        return None
    d = RUN / "credentials" / UNIT
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True, mode=0o700)
    for name, source in items:
        (d / name).write_bytes(Path(source).read_bytes())
        (d / name).chmod(0o400)
        if user is not None:
            os.chown(d / name, user.pw_uid, user.pw_gid)
    d.chmod(0o500)
    if user is not None:
        os.chown(d, user.pw_uid, user.pw_gid)
    return d


def start() -> None:
    if current_pid() is not None:
        return
    u = unit()
    env = dict(os.environ)
    for item in u.get("Environment", []):
        for kv in shlex.split(item):
            k, v = kv.split("=", 1)
            env[k] = v
    user = dynamic_user(u)
    cwd = u.get("WorkingDirectory", [None])[0]
    if user is not None and cwd:
        Path(cwd).mkdir(parents=True, exist_ok=True)
        chown_tree(Path(cwd), user)  # StateDirectory= with DynamicUser=: the user owns it
    creds = credentials(u, user)
    if creds is not None:
        env["CREDENTIALS_DIRECTORY"] = str(creds)
    ids = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    with open(
        RUN / ("agent.log" if UNIT == "se-forwarder.service" else f"{UNIT}.log"), "ab"
    ) as out:
        p = subprocess.Popen(
            shlex.split(u["ExecStart"][0]),
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            umask=int(u.get("UMask", ["0022"])[0], 8),
            **ids,
        )
    pidfile().write_text(str(p.pid))


def main() -> int:
    RUN.mkdir(parents=True, exist_ok=True)
    with open(RUN / "calls.log", "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\n")
    words = [a for a in sys.argv[1:] if not a.startswith("-")]
    flags = [a for a in sys.argv[1:] if a.startswith("-")]
    cmd = words[0]
    if cmd == "daemon-reload":
        pass
    elif cmd == "enable":
        (RUN / "enabled").touch()
    elif cmd == "disable":
        (RUN / "enabled").unlink(missing_ok=True)
        if "--now" in flags:
            stop()
    elif cmd == "start":
        start()
    elif cmd == "restart":
        stop()
        start()
    elif cmd == "stop":
        stop()
    elif cmd == "try-restart":
        if current_pid():
            stop()
            start()
    elif cmd == "is-active":
        return 0 if current_pid() else 3
    else:
        print(f"fake systemctl: unsupported {cmd}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
