"""infra/scripts/install.ps1, read, not run: no Windows runner here, and PowerShell cannot run on
this machine. Each test holds the script to one behaviour the Linux installer's tests prove by
running it (exit codes checked, rollback, the service account, permissions, no file a local user
can plant), so a change that drops it fails here."""

from __future__ import annotations

import re

from helpers import REPO

INSTALL_PS1 = REPO / "infra" / "scripts" / "install.ps1"


def test_install_ps1_checks_every_sc_exe_call():
    text = INSTALL_PS1.read_text()
    calls = [
        line for line in text.splitlines() if "sc.exe" in line and not line.lstrip().startswith("#")
    ]
    bare = [c for c in calls if re.search(r"&\s*sc\.exe", c) and "@args" not in c]
    assert bare == [], f"sc.exe calls whose exit code is not checked: {bare}"
    body = re.search(r"function Invoke-Sc.*?\n}", text, re.DOTALL).group(0)
    assert "$LASTEXITCODE -ne 0" in body and "Fail 14" in body
    assert len(re.findall(r"Invoke-Sc '", text)) >= 5


def test_install_ps1_rollback_restores_the_previous_config():
    text = INSTALL_PS1.read_text()
    assert re.search(r"Copy-Item -Force \$ConfigPath \$previousConfig", text)
    rollback = text[text.index("rolling back") : text.index("Fail 13")]
    assert "Move-Item -Force $previousConfig $ConfigPath" in rollback


def test_install_ps1_refuses_a_per_user_python():
    text = INSTALL_PS1.read_text()
    assert "sys.base_prefix" in text and "--scope machine" in text
    check = text[text.index("$usersRoot") : text.index('Say "using $Python')]
    assert "Fail 10" in check


def test_install_ps1_registers_a_module_that_exists():
    """The service's binPath names the module the SCM starts; a rename must not leave it
    dangling."""
    import importlib.util

    modules = re.findall(r"python\.exe`\"\s+-m\s+([\w.]+)", INSTALL_PS1.read_text())
    assert modules, "install.ps1 no longer registers `python.exe -m <module>`"
    for name in modules:
        assert importlib.util.find_spec(name) is not None, name


def test_install_ps1_rolls_back_to_the_previous_command_line_not_to_this_versions_module():
    """A version before the rename of ``se_forwarder.platform`` registered another module: a
    rollback to it puts the service's binPath back exactly as it was, not rebuilt with this
    version's module path (the SCM would start a module the old virtualenv does not have)."""
    text = INSTALL_PS1.read_text()
    assert "$previousBin = Get-ServiceBin" in text
    rollback = text[text.index('Say "rolling back to $previous"') : text.index("Fail 13")]
    assert "Set-ServiceBin $previousBin" in rollback and "Set-ServiceVenv" not in rollback
    assert "$svc.PathName" in _body(text, "Get-ServiceBin")


def _body(text: str, function: str) -> str:
    return re.search(rf"function {function}.*?\n}}", text, re.DOTALL).group(0)


def test_install_ps1_takes_the_data_directory_away_from_local_users():
    """%ProgramData% lets any local user create folders and files that inherit its permissions:
    the data directory is taken over and given explicit permissions before anything is written
    there: no inheritance, owner Administrators, SYSTEM and Administrators full control, the
    service read-only but for state and logs; every icacls call checked."""
    text = INSTALL_PS1.read_text()
    protect = _body(text, "Protect-DataDir")
    assert "$system = '*S-1-5-18'; $admins = '*S-1-5-32-544'; $service = '*S-1-5-19'" in protect
    assert re.search(r"\$DataDir /setowner \$admins /T", protect)
    grant = next(line for line in protect.splitlines() if "/inheritance:r" in line)
    assert '/grant:r "${system}:(OI)(CI)F" "${admins}:(OI)(CI)F" "${service}:(OI)(CI)RX"' in grant
    assert re.search(r'"\$DataDir\\\*" /reset /T', protect)
    for d in ("$StateDir", "$LogDir"):
        assert f'{d} /grant:r "${{service}}:(OI)(CI)M"' in protect, d
    assert "Users" not in protect and "Everyone" not in protect
    body = _body(text, "Invoke-Icacls")
    assert "$LASTEXITCODE -ne 0" in body and "Fail " in body
    bare = [
        line
        for line in text.splitlines()
        if re.search(r"&\s*icacls\.exe", line) and "@args" not in line
    ]
    assert bare == [], f"icacls calls whose exit code is not checked: {bare}"
    # taken over before anything is written into it
    main = text[text.index("# 1. Python 3.11+") :]
    assert main.index("Protect-DataDir") < main.index("Set-Content -Encoding ascii $newConfig")
    assert main.index("Protect-DataDir") < main.index("Copy-Item -Force $ConfigPath")


def test_install_ps1_never_writes_into_a_config_file_someone_else_made():
    """A user could pre-create config.toml.new, have the installer write into it and move it
    into place, keeping control of the live config (and its hooks): a stale one is deleted, and
    the install stops if it cannot be."""
    text = INSTALL_PS1.read_text()
    step = text[
        text.index("# 4. configuration") : text.index("Set-Content -Encoding ascii $newConfig")
    ]
    remove = step.index("Remove-Item -Force $newConfig")
    check = step.index("if (Test-Path $newConfig) { Fail")
    assert remove < check
