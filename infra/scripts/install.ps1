<#
.SYNOPSIS
    Install, upgrade or remove se-forwarder as a Windows service (Windows Server 2019+).

.DESCRIPTION
    The Windows counterpart of install.sh, kept deliberately simple. Run as Administrator.
    Idempotent: run it again with another -Version/-Package to upgrade in place.

      1. finds Python 3.11+ (py.exe launcher or python.exe on PATH, or -Python), installed
         machine-wide: the service account cannot run a per-user Python         exit 10
      2. checks IMDS answers, directly (no proxy)                                  exit 12
      3. creates a new virtualenv under %ProgramFiles%\se-forwarder\<stamp> and installs
         se-forwarder[azure] and pywin32 (pinned version from the index, or a wheel)  exit 11
      4. writes %ProgramData%\se-forwarder\config.toml (no secrets) and validates it with
         the new version's check-config                                            exit 2
      5. registers/updates the service "se-forwarder" (runs as NT AUTHORITY\LocalService,
         automatic start, restarts after 5 s / 10 s / 30 s on failure) pointing at the new
         virtualenv, and (re)starts it                                             exit 14
      6. waits until `se-forwarder status` reports it healthy, else points the service back
         at the previous virtualenv and restores the previous config.toml          exit 13

    State: %ProgramData%\se-forwarder\state (kept on upgrade and on -Uninstall unless -Purge).
    Logs:  %ProgramData%\se-forwarder\logs\se-forwarder.log, service events in the
           Application event log (source se-forwarder).
    The service stops the agent with CTRL_BREAK and waits up to 30 s (see winservice.py).

.EXAMPLE
    .\install.ps1 -Version 0.1.0 -LogsEndpoint https://<dce>.ingest.monitor.azure.com -DcrId dcr-... -ClientId <uami-client-id>
.EXAMPLE
    .\install.ps1 -Uninstall -Purge
#>
[CmdletBinding()]
param(
    [string]$Version = '',
    [string]$Package = '',
    [string]$IndexUrl = '',
    [string]$LogsEndpoint = '',
    [string]$DcrId = '',
    [string]$RecordsStream = 'Custom-ScheduledEvents',
    [string]$HeartbeatsStream = 'Custom-ScheduledEventsAgent',
    [string]$ClientId = '',
    [string]$ImdsEndpoint = 'http://169.254.169.254',
    [string]$Python = '',
    [int]$VerifyTimeout = 180,
    [switch]$Uninstall,
    [switch]$Purge
)

$ErrorActionPreference = 'Stop'
$ServiceName = 'se-forwarder'
$DataDir = Join-Path $env:ProgramData 'se-forwarder'
$ConfigPath = Join-Path $DataDir 'config.toml'
$StateDir = Join-Path $DataDir 'state'
$LogDir = Join-Path $DataDir 'logs'
$InstallRoot = Join-Path $env:ProgramFiles 'se-forwarder'

function Fail([int]$Code, [string]$Message) {
    Write-Error "install.ps1: ERROR: $Message" -ErrorAction Continue
    exit $Code
}
function Say([string]$Message) { Write-Host "install.ps1: $Message" }

function Get-ServiceVenv {
    # the virtualenv the registered service runs (from its binPath), or $null
    $svc = Get-CimInstance Win32_Service -Filter "Name='$ServiceName'" -ErrorAction SilentlyContinue
    if (-not $svc) { return $null }
    if ($svc.PathName -match '"([^"]+)\\Scripts\\python\.exe"') { return $Matches[1] }
    return $null
}

function Invoke-Sc([string]$What) {
    # sc.exe with the remaining arguments; every call's exit code is checked
    $out = & sc.exe @args 2>&1
    if ($LASTEXITCODE -ne 0) { Fail 14 "sc.exe could not $What (exit $LASTEXITCODE): $out" }
}

function Set-ServiceVenv([string]$Venv) {
    $bin = "`"$Venv\Scripts\python.exe`" -m se_forwarder.winservice"
    if (Get-Service $ServiceName -ErrorAction SilentlyContinue) {
        Invoke-Sc 'point the service at the new virtualenv' config $ServiceName binPath= $bin
    } else {
        Invoke-Sc 'create the service' create $ServiceName binPath= $bin start= auto obj= 'NT AUTHORITY\LocalService' DisplayName= 'Azure Scheduled Events forwarder'
        Invoke-Sc 'set the service description' description $ServiceName 'Forwards Azure IMDS Scheduled Events to Log Analytics / Event Hubs.'
        Invoke-Sc 'set the service recovery actions' failure $ServiceName reset= 86400 actions= restart/5000/restart/10000/restart/30000
    }
}

# ------------------------------------------------------------------------------------ uninstall
if ($Uninstall) {
    if (Get-Service $ServiceName -ErrorAction SilentlyContinue) {
        Stop-Service $ServiceName -ErrorAction SilentlyContinue
        Invoke-Sc 'delete the service' delete $ServiceName
    }
    Remove-Item -Recurse -Force $InstallRoot -ErrorAction SilentlyContinue
    if ($Purge) {
        Remove-Item -Recurse -Force $DataDir -ErrorAction SilentlyContinue
        Say 'removed se-forwarder, its configuration and its state'
    } else {
        Say "removed se-forwarder; kept $DataDir (-Purge removes it)"
    }
    exit 0
}

# -------------------------------------------------------------------------------------- checks
if (-not $Version -and -not $Package) { Fail 2 'give -Version V (from the package index) or -Package WHEEL|URL' }
if ($Version -and $Package) { Fail 2 'give either -Version or -Package, not both' }
$configGiven = [bool]$LogsEndpoint
if ($configGiven -and -not $DcrId) { Fail 2 '-LogsEndpoint and -DcrId go together' }
if (-not $configGiven -and -not (Test-Path $ConfigPath)) { Fail 2 'no configuration: give -LogsEndpoint and -DcrId' }

# 1. Python 3.11+
if (-not $Python) {
    $launcher = Get-Command py.exe -ErrorAction SilentlyContinue
    if ($launcher) { $Python = (& py.exe -3 -c 'import sys; print(sys.executable)' 2>$null) }
    if (-not $Python) { $Python = (Get-Command python.exe -ErrorAction SilentlyContinue).Source }
}
if (-not $Python -or -not (Test-Path $Python)) { Fail 10 'no Python found: install Python 3.11+ (python.org or winget install Python.Python.3.12) or pass -Python' }
& $Python -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'
if ($LASTEXITCODE -ne 0) { Fail 10 "$Python is older than 3.11" }
# The service runs as LocalService through a virtualenv whose python.exe starts the BASE
# interpreter: a per-user Python (under C:\Users\..., e.g. AppData\Local\Programs\Python or the
# Microsoft Store one) is not readable by that account and the service would never start.
$basePrefix = (& $Python -c 'import sys; print(sys.base_prefix)' | Select-Object -First 1)
if ($LASTEXITCODE -ne 0 -or -not $basePrefix) { Fail 10 "$Python does not run" }
$usersRoot = Join-Path $env:SystemDrive 'Users'
if ($basePrefix.StartsWith($usersRoot, [System.StringComparison]::OrdinalIgnoreCase) -or $basePrefix -match '\\WindowsApps\\') {
    Fail 10 "$Python is a per-user installation ($basePrefix) that the service account (LocalService) cannot run: install Python for all users (winget install Python.Python.3.12 --scope machine, or the python.org installer with 'Install for all users') and pass -Python 'C:\Program Files\Python312\python.exe'"
}
Say "using $Python (installed in $basePrefix)"

# 2. IMDS, never through a proxy
try {
    $req = [System.Net.HttpWebRequest]::Create("$ImdsEndpoint/metadata/instance?api-version=2021-02-01")
    $req.Headers.Add('Metadata', 'true')
    $req.Proxy = [System.Net.GlobalProxySelection]::GetEmptyWebProxy()
    $req.Timeout = 5000
    $resp = $req.GetResponse(); $resp.Close()
} catch [System.Net.WebException] {
    if (-not $_.Exception.Response) {
        Fail 12 "IMDS unreachable at $ImdsEndpoint ($($_.Exception.Message)); it is reached directly, never through a proxy"
    }
}
Say "IMDS reachable at $ImdsEndpoint"

# 3. package into a fresh virtualenv
$stamp = Get-Date -Format 'yyyyMMddTHHmmss'
$venv = Join-Path $InstallRoot $stamp
New-Item -ItemType Directory -Force -Path $InstallRoot, $StateDir, $LogDir | Out-Null
& $Python -m venv $venv
if ($LASTEXITCODE -ne 0) { Fail 10 "could not create a virtualenv in $venv" }
$spec = if ($Version) { "se-forwarder[azure]==$Version" } elseif ($Package -match '^https?://') { "se-forwarder[azure] @ $Package" } else { "$Package[azure]" }
$pipArgs = @('-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', $spec, 'pywin32')
if ($IndexUrl) { $pipArgs += @('--index-url', $IndexUrl) }
& "$venv\Scripts\python.exe" @pipArgs
if ($LASTEXITCODE -ne 0) {
    Remove-Item -Recurse -Force $venv -ErrorAction SilentlyContinue
    Fail 11 "could not install $spec (no network to the package index, wrong version or file?)"
}

# 4. configuration: TOML literal strings ('...') need no escaping of backslashes
$newConfig = "$ConfigPath.new"
if ($configGiven) {
    @"
# Written by install.ps1. No secrets: the agent uses the VM's managed identity.
[agent]
state_dir = '$StateDir'

[imds]
endpoint = '$ImdsEndpoint'

[identity]
kind = "managed"
client_id = '$ClientId'

[sinks.log_analytics]
endpoint = '$LogsEndpoint'
dcr_immutable_id = '$DcrId'
records_stream = '$RecordsStream'
heartbeats_stream = '$HeartbeatsStream'
"@ | Set-Content -Encoding ascii $newConfig
}
$check = if ($configGiven) { $newConfig } else { $ConfigPath }
& "$venv\Scripts\se-forwarder.exe" check-config --config $check
if ($LASTEXITCODE -ne 0) {
    Remove-Item -Force $newConfig -ErrorAction SilentlyContinue
    Remove-Item -Recurse -Force $venv -ErrorAction SilentlyContinue
    Fail 2 'configuration rejected by check-config'
}
$previousConfig = "$ConfigPath.previous"
Remove-Item -Force $previousConfig -ErrorAction SilentlyContinue
if ($configGiven) {
    # kept until the new version is healthy: a rollback puts it back (as install.sh does)
    if (Test-Path $ConfigPath) { Copy-Item -Force $ConfigPath $previousConfig }
    Move-Item -Force $newConfig $ConfigPath
}
# the service account writes state and logs only
& icacls.exe $StateDir /grant 'NT AUTHORITY\LocalService:(OI)(CI)M' | Out-Null
& icacls.exe $LogDir /grant 'NT AUTHORITY\LocalService:(OI)(CI)M' | Out-Null

# 5. point the service at the new virtualenv and (re)start it
$previous = Get-ServiceVenv
if (Get-Service $ServiceName -ErrorAction SilentlyContinue) { Stop-Service $ServiceName }
Set-ServiceVenv $venv
Start-Service $ServiceName

# 6. verify it polls
$deadline = (Get-Date).AddSeconds($VerifyTimeout)
while ($true) {
    & "$venv\Scripts\se-forwarder.exe" status --state-dir $StateDir
    if ($LASTEXITCODE -eq 0) { break }
    if ((Get-Date) -gt $deadline) {
        if ($previous -and (Test-Path $previous)) {
            Say "rolling back to $previous"
            Stop-Service $ServiceName -ErrorAction SilentlyContinue
            if (Test-Path $previousConfig) { Move-Item -Force $previousConfig $ConfigPath }
            Set-ServiceVenv $previous
            Start-Service $ServiceName -ErrorAction SilentlyContinue
            Remove-Item -Recurse -Force $venv -ErrorAction SilentlyContinue
        }
        Fail 13 "the agent did not become healthy within $VerifyTimeout s: see $LogDir and the Application event log"
    }
    Start-Sleep -Seconds 2
}

# keep the running and the previous virtualenv only
Get-ChildItem $InstallRoot -Directory | Where-Object { $_.FullName -ne $venv -and $_.FullName -ne $previous } |
    Remove-Item -Recurse -Force -ErrorAction SilentlyContinue
Remove-Item -Force $previousConfig -ErrorAction SilentlyContinue
Say "se-forwarder installed and polling (state in $StateDir)"
exit 0
