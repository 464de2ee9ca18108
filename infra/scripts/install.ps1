<#
.SYNOPSIS
    Install, upgrade or remove se-forwarder as a Windows service (Windows Server 2019+).

.DESCRIPTION
    The Windows counterpart of install.sh, kept deliberately simple. Run as Administrator.
    Idempotent: run it again with another -Version/-Package to upgrade in place.

      1. finds Python 3.11+ (py.exe launcher or python.exe on PATH, or -Python), installed
         machine-wide: the service account cannot run a per-user Python         exit 10
      2. checks IMDS answers, directly (no proxy)                                  exit 12
      3. downloads the wheel and the lock (Azure Storage blob URLs with the VM's managed
         identity: no SAS), checks the wheel against -PackageSha256 and the lock, creates a new
         virtualenv under %ProgramFiles%\se-forwarder\<stamp> and installs se-forwarder[azure]
         and pywin32 into it (with -Lock: pip's hash-checking mode, pywin32 pinned in the lock,
         which must be made on Windows)                                          exit 11
      4. writes %ProgramData%\se-forwarder\config.toml (no secrets) and validates it with
         the new version's check-config                                            exit 2
      5. registers/updates the service "se-forwarder" (runs as NT AUTHORITY\LocalService,
         automatic start, restarts after 5 s / 10 s / 30 s on failure) pointing at the new
         virtualenv, and (re)starts it                                             exit 14
      6. waits until `se-forwarder status` reports it healthy, else points the service back
         at the previous virtualenv and restores the previous config.toml          exit 13

    The package: a wheel you control (-Package: a file, or an https URL; never se-forwarder by name
    from the public index, where anyone could register it), or -Version from the index you name
    (-IndexUrl, required with -Version). -Lock pins every dependency with its sha256
    (infra/scripts/lock-dependencies.py --also pywin32==<version>, run on Windows).

    Permissions: %ProgramData% lets every local user create folders and files, and what is created
    there inherits that. %ProgramData%\se-forwarder is taken over (owner Administrators, every
    file below it too), inheritance removed, and given explicitly: full control to SYSTEM and
    Administrators, read to the service account (LocalService), which may also write state and
    logs; a stale config.toml.new (a file a user may have planted to keep control of the config
    and its hooks) is deleted before the new config is written.

    State: %ProgramData%\se-forwarder\state (kept on upgrade and on -Uninstall unless -Purge).
    Logs:  %ProgramData%\se-forwarder\logs\se-forwarder.log, service events in the
           Application event log (source se-forwarder).
    The service stops the agent with CTRL_BREAK and waits up to 30 s (see winservice.py).

.EXAMPLE
    .\install.ps1 -Package https://<account>.blob.core.windows.net/se-forwarder/se_forwarder-0.1.0-py3-none-any.whl -Lock https://<account>.blob.core.windows.net/se-forwarder/se_forwarder-0.1.0-windows.lock -LogsEndpoint https://<dce>.ingest.monitor.azure.com -DcrId dcr-... -ClientId <uami-client-id>
.EXAMPLE
    .\install.ps1 -Uninstall -Purge
#>
[CmdletBinding()]
param(
    [string]$Version = '',
    [string]$Package = '',
    [string]$IndexUrl = '',
    [string]$PackageSha256 = '',
    [string]$Lock = '',
    [ValidateSet('auto', 'managed', 'none')]
    [string]$DownloadIdentity = 'auto',
    [string]$LogsEndpoint = '',
    [string]$DcrId = '',
    [string]$RecordsStream = 'Custom-ScheduledEvents',
    [string]$HeartbeatsStream = 'Custom-ScheduledEventsAgent',
    [string]$ClientId = '',
    [string]$Tags = '',         # VM tag names the agent records (agent.tags), comma-separated
    [ValidateSet('', 'observe', 'microsoft')]
    [string]$PolicyPreset = '', # [policy] preset ('' = observe)
    [string]$PolicyRules = '',  # [[policy.rules]] as a JSON array of rule objects ('' = none)
    [string]$ImdsEndpoint = 'http://169.254.169.254',
    [string]$Python = '',
    [int]$VerifyTimeout = 180,
    [string]$RunId = '',        # ignored: a new value makes Azure run the Run Command again
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

function Invoke-Icacls([string]$What) {
    # icacls.exe with the remaining arguments; every call's exit code is checked
    $out = & icacls.exe @args 2>&1
    if ($LASTEXITCODE -ne 0) { Fail 1 "icacls could not $What (exit $LASTEXITCODE): $out" }
}

function Protect-DataDir {
    # Well-known SIDs, whatever the system's language: SYSTEM, Administrators, LocalService.
    $system = '*S-1-5-18'; $admins = '*S-1-5-32-544'; $service = '*S-1-5-19'
    New-Item -ItemType Directory -Force -Path $DataDir, $StateDir, $LogDir | Out-Null
    # a directory or file a user created first would still be theirs: take them over
    Invoke-Icacls 'take ownership of the data directory' $DataDir /setowner $admins /T /C /Q
    Invoke-Icacls 'set the data directory permissions' $DataDir /inheritance:r /grant:r "${system}:(OI)(CI)F" "${admins}:(OI)(CI)F" "${service}:(OI)(CI)RX" /Q
    # below it, nothing but what the directory gives (explicit entries a user added are dropped)
    Invoke-Icacls 'reset the permissions below the data directory' "$DataDir\*" /reset /T /C /Q
    Invoke-Icacls 'let the service write its state' $StateDir /grant:r "${service}:(OI)(CI)M" /Q
    Invoke-Icacls 'let the service write its logs' $LogDir /grant:r "${service}:(OI)(CI)M" /Q
}

function Invoke-Sc([string]$What) {
    # sc.exe with the remaining arguments; every call's exit code is checked
    $out = & sc.exe @args 2>&1
    if ($LASTEXITCODE -ne 0) { Fail 14 "sc.exe could not $What (exit $LASTEXITCODE): $out" }
}

function Get-ServiceBin {
    # the registered service's whole command line (binPath), or $null: a rollback puts it back
    # as it was, since an older version's module path may differ from this one's
    $svc = Get-CimInstance Win32_Service -Filter "Name='$ServiceName'" -ErrorAction SilentlyContinue
    if ($svc) { return $svc.PathName }
    return $null
}

function Set-ServiceVenv([string]$Venv) {
    Set-ServiceBin "`"$Venv\Scripts\python.exe`" -m se_forwarder.oshost.winservice"
}

function Set-ServiceBin([string]$bin) {
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
if (-not $Version -and -not $Package) { Fail 2 'give -Package WHEEL|URL (a wheel you control) or -Version V with -IndexUrl URL' }
if ($Version -and $Package) { Fail 2 'give either -Version or -Package, not both' }
if ($Version -and -not $IndexUrl) { Fail 2 '-Version needs -IndexUrl: se-forwarder is not on the public index, and a name anyone can register there is never installed from it' }
if ($PackageSha256 -and $PackageSha256 -notmatch '^[0-9a-fA-F]{64}$') { Fail 2 '-PackageSha256 must be 64 hex digits' }
foreach ($src in @($Package, $Lock)) {
    if ($src -match '^http://' -and $src -notmatch '^http://(127\.0\.0\.1|localhost)[:/]') { Fail 2 'a package or lock URL must be https://' }
}
$configGiven = [bool]$LogsEndpoint
# the fleet settings (install.sh --tags, --policy-preset, --policy-rules): checked here, before
# anything is written; the new version's check-config validates the rules
$tagNames = @()
if ($Tags) {
    $tagNames = @($Tags -split ',')
    foreach ($t in $tagNames) {
        if (-not $t -or $t.Trim() -ne $t -or $t -match '[<>%&\\?/]') { Fail 2 "-Tags: '$t' is empty, has spaces around it, or holds < > % & \ ? / (Azure refuses them)" }
    }
    if ($tagNames.Count -gt 10) { Fail 2 "-Tags: at most 10 tag names (got $($tagNames.Count))" }
}
if ($PolicyRules -and $PolicyRules.TrimStart()[0] -ne '[') { Fail 2 '-PolicyRules takes a JSON array of rule objects' }
if (($Tags -or $PolicyPreset -or $PolicyRules) -and -not $configGiven) { Fail 2 '-Tags, -PolicyPreset and -PolicyRules go with -LogsEndpoint and -DcrId (the configuration is written whole)' }
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

# 3. package: downloaded (managed identity for Azure Storage), checked, then installed
function Show-Url([string]$Url) { return ($Url -replace '\?.*$', '?***') }

function Get-Source([string]$Src, [string]$Dest) {
    # a local file is copied, a URL downloaded; an Azure Storage blob URL without a SAS with a
    # managed-identity token (IMDS reached directly), never following a redirect with it
    if ($Src -notmatch '^https?://') {
        if (-not (Test-Path $Src -PathType Leaf)) { Fail 11 "${Src}: no such file" }
        Copy-Item -Force $Src $Dest
        return
    }
    $uri = [System.Uri]$Src
    $storage = $uri.Host -match '\.blob\.(core\.windows\.net|core\.chinacloudapi\.cn|core\.usgovcloudapi\.net|storage\.azure\.net)$'
    $useIdentity = $DownloadIdentity -eq 'managed' -or ($DownloadIdentity -eq 'auto' -and $storage -and $uri.Query -notmatch 'sig=')
    $headers = @{}
    if ($useIdentity) {
        $tokenUri = "$ImdsEndpoint/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fstorage.azure.com%2F"
        if ($ClientId) { $tokenUri += "&client_id=$ClientId" }
        try {
            $req = [System.Net.HttpWebRequest]::Create($tokenUri)
            $req.Headers.Add('Metadata', 'true')
            $req.Proxy = [System.Net.GlobalProxySelection]::GetEmptyWebProxy()
            $req.Timeout = 30000
            $resp = $req.GetResponse()
            $reader = New-Object System.IO.StreamReader($resp.GetResponseStream())
            $token = ($reader.ReadToEnd() | ConvertFrom-Json).access_token
            $resp.Close()
        } catch {
            Fail 11 "no managed-identity token for Azure Storage: $($_.Exception.Message)"
        }
        $headers = @{ Authorization = "Bearer $token"; 'x-ms-version' = '2023-11-03' }
    }
    Say "downloading $(Show-Url $Src)"
    try {
        Invoke-WebRequest -Uri $Src -Headers $headers -OutFile $Dest -UseBasicParsing -MaximumRedirection 0 -TimeoutSec 120
    } catch {
        $hint = ''
        if ($useIdentity) { $hint = ': give the VM identity Storage Blob Data Reader on the container' }
        Fail 11 "could not download $(Show-Url $Src) ($($_.Exception.Message))$hint"
    }
}

[System.Net.ServicePointManager]::SecurityProtocol = [System.Net.SecurityProtocolType]::Tls12
$stamp = Get-Date -Format 'yyyyMMddTHHmmss'
$venv = Join-Path $InstallRoot $stamp
$downloads = Join-Path $InstallRoot "downloads.$stamp"
Protect-DataDir
New-Item -ItemType Directory -Force -Path $InstallRoot, $downloads | Out-Null
$extras = '[azure]'
$wheel = $null
if ($Package) {
    $name = Split-Path -Leaf (($Package -split '\?')[0])
    if ($name -notmatch '^se_forwarder-([^-]+)-.*\.whl$') { Fail 2 "-Package $(Show-Url $Package): not a se-forwarder wheel" }
    $wheelVersion = $Matches[1]
    $wheel = Join-Path $downloads $name
    Get-Source $Package $wheel
    $sha = (Get-FileHash -Algorithm SHA256 $wheel).Hash.ToLowerInvariant()
    if ($PackageSha256 -and $sha -ne $PackageSha256.ToLowerInvariant()) { Fail 11 "the wheel's sha256 is $sha, not the expected $PackageSha256" }
}
$pipTargets = @()
if ($Lock) {
    $lockFile = Join-Path $downloads 'dependencies.lock'
    Get-Source $Lock $lockFile
    $lines = (Get-Content -Raw $lockFile) -replace '\\\r?\n', ' ' -split '\r?\n' | ForEach-Object { ($_ -split ' #')[0].Trim() } | Where-Object { $_ -and -not $_.StartsWith('#') }
    $ours = @($lines | Where-Object { $_ -match '^se[-_.]forwarder(\[[^\]]*\])?\s*==' })
    $deps = @($lines | Where-Object { $_ -notmatch '^se[-_.]forwarder(\[[^\]]*\])?\s*==' })
    if (-not ($deps | Where-Object { $_ -match '^pywin32\s*==' })) { Fail 2 'the lock has no pywin32: make the Windows lock on Windows with lock-dependencies.py --also pywin32==<version>' }
    $lockVersion = ''; $lockHashes = @()
    if ($ours.Count -eq 1 -and $ours[0] -match '==\s*([^\s;]+)') {
        $lockVersion = $Matches[1]
        $lockHashes = @([regex]::Matches($ours[0].ToLowerInvariant(), 'sha256:([0-9a-f]{64})') | ForEach-Object { $_.Groups[1].Value })
    }
    if ($wheel) {
        if ($lockVersion -and $lockVersion -ne $wheelVersion) { Fail 11 "the lock is for se-forwarder $lockVersion, the wheel is $wheelVersion" }
        if ($lockHashes.Count -and $lockHashes -notcontains $sha) { Fail 11 "the wheel's sha256 $sha is not the one in the lock" }
        $first = "se-forwarder$extras @ $(([System.Uri](Resolve-Path $wheel).Path).AbsoluteUri) --hash=sha256:$sha"
    } else {
        if (-not $lockHashes.Count -or $lockVersion -ne $Version) { Fail 11 "with -Version, the lock must pin se-forwarder==$Version with its sha256" }
        $first = $ours[0] -replace '^[A-Za-z0-9._-]+\s*(\[[^\]]*\])?', "se-forwarder$extras"
    }
    $requirements = Join-Path $downloads 'requirements.txt'
    (@($first) + $deps) | Set-Content -Encoding ascii $requirements
    $pipTargets = @('--require-hashes', '-r', $requirements)
    $shown = "se-forwarder and the dependencies pinned by $(Show-Url $Lock) (hash-checked)"
} else {
    $spec = if ($Version) { "se-forwarder$extras==$Version" } else { "$wheel$extras" }
    $pipTargets = @($spec, 'pywin32')
    $shown = "se-forwarder$extras from $(Show-Url ($Package + $Version))"
    Write-Warning 'install.ps1: the dependencies are not pinned (no -Lock): pip takes their newest matching versions from its index'
}

& $Python -m venv $venv
if ($LASTEXITCODE -ne 0) { Fail 10 "could not create a virtualenv in $venv" }
$pipArgs = @('-m', 'pip', 'install', '--disable-pip-version-check', '--no-input') + $pipTargets
if ($IndexUrl) { $pipArgs += @('--index-url', $IndexUrl) }
if ($Version) {
    # se-forwarder by name from the index named here only: no configured extra index or find-links
    $env:PIP_CONFIG_FILE = 'NUL'
    Remove-Item Env:PIP_EXTRA_INDEX_URL, Env:PIP_FIND_LINKS, Env:PIP_INDEX_URL -ErrorAction SilentlyContinue
}
Say "installing $shown"
& "$venv\Scripts\python.exe" @pipArgs
$pipExit = $LASTEXITCODE
Remove-Item -Recurse -Force $downloads -ErrorAction SilentlyContinue
if ($pipExit -ne 0) {
    Remove-Item -Recurse -Force $venv -ErrorAction SilentlyContinue
    Fail 11 "could not install ${shown}: no network to the package index, a wrong version or file, or a dependency the lock does not pin (or a hash that does not match)"
}

# 4. configuration: TOML literal strings ('...') need no escaping of backslashes
$newConfig = "$ConfigPath.new"
# never write into a file someone else made (Protect-DataDir already took it over and no user may
# create one any more): a stale one goes first
Remove-Item -Force $newConfig -ErrorAction SilentlyContinue
if (Test-Path $newConfig) { Fail 1 "cannot remove the stale $newConfig" }
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
    if ($tagNames.Count -gt 0) {
        # [agent] tags, as a line right after state_dir
        $quoted = ($tagNames | ForEach-Object { "'" + $_ + "'" }) -join ', '
        (Get-Content $newConfig) -replace "^state_dir = .*$", "`$0`ntags = [$quoted]" | Set-Content -Encoding ascii $newConfig
    }
    if ($PolicyPreset -or $PolicyRules) {
        Add-Content -Encoding ascii $newConfig "`n[policy]"
        if ($PolicyPreset) { Add-Content -Encoding ascii $newConfig "preset = '$PolicyPreset'" }
    }
    if ($PolicyRules) {
        # JSON to [[policy.rules]] tables, by the new version's Python (as install.sh does)
        $render = 'import json,sys; r=json.loads(sys.argv[1]); assert isinstance(r,list) and all(isinstance(x,dict) for x in r), "a JSON array of rule objects"; v=lambda x: ("true" if x else "false") if isinstance(x,bool) else json.dumps(x) if not isinstance(x,(list,dict)) else ("[" + ", ".join(v(i) for i in x) + "]" if isinstance(x,list) else "{" + ", ".join(k + " = " + v(i) for k,i in x.items()) + "}"); print("\n".join("[[policy.rules]]\n" + "\n".join(k + " = " + v(i) for k,i in x.items() if i is not None) for x in r))'
        $rulesToml = & "$venv\Scripts\python.exe" -c $render $PolicyRules
        if ($LASTEXITCODE -ne 0) {
            Remove-Item -Force $newConfig -ErrorAction SilentlyContinue
            Remove-Item -Recurse -Force $venv -ErrorAction SilentlyContinue
            Fail 2 '-PolicyRules: not a JSON array of rule objects'
        }
        Add-Content -Encoding utf8 $newConfig ($rulesToml -join "`n")
    }
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

# 5. point the service at the new virtualenv and (re)start it
$previous = Get-ServiceVenv
$previousBin = Get-ServiceBin
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
            Set-ServiceBin $previousBin
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
