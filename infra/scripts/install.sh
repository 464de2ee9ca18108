#!/usr/bin/env bash
# se-forwarder installer for Linux VMs (systemd). Idempotent: run again to upgrade or reconfigure
# in place.
#
#   install.sh --package https://<account>.blob.core.windows.net/se-forwarder/se-forwarder-0.1.0-bundle.tar.gz \
#              --package-sha256 <sha256 of the bundle> \
#              --logs-endpoint https://<dce>.ingest.monitor.azure.com --dcr-id dcr-0123... \
#              [--client-id <uami-client-id>]
#   install.sh --package ./se_forwarder-0.1.0-py3-none-any.whl --lock ./se_forwarder-0.1.0.lock \
#              --file-sink /var/lib/se-forwarder/records.jsonl
#   install.sh --version 0.1.0 --index-url https://<your index>/simple --lock ./se_forwarder-0.1.0.lock ...
#   install.sh ... --webhook-url-file /root/slack.url --webhook-format slack --extras azure,webhook
#   install.sh --uninstall [--purge]
#   install.sh --collector --package <bundle> --config-file ./collector.toml   (the collector, below)
#
# Where the package comes from (se-forwarder is not on the public index, and a name anyone can
# register there must never be installed as root): an offline bundle (--package ...tar.gz, from
# infra/scripts/build-bundle.py: every wheel for the supported Python versions and architectures
# and one hash-pinned lock per target; installed with no package index at all), a wheel you give
# (--package: a file, or an https URL; Azure Storage blob URLs are fetched with the VM's managed
# identity, so no SAS is needed), or --version from an index you name (--index-url; pip's
# configured extra indexes and find-links are ignored then). --lock pins every dependency of a
# wheel with its sha256 (pip's hash-checking mode) and the wheel itself
# (infra/scripts/lock-dependencies.py). --package-sha256 pins the bundle or wheel itself.
#
# What it does, in order (each failure stops it with a message and a non-zero exit status):
#   1. finds Python >= 3.11 with venv (python3, python3.13, python3.12, python3.11); with
#      --install-prerequisites, installs the distribution's when there is none; else says exactly
#      what to install on this distribution                                  (exit 10 if not);
#      with it, turns --policy-rules into TOML (JSON, an array of rule objects) (exit 2 if not)
#   2. checks IMDS answers, directly, never through a proxy                  (exit 12 if not)
#   3. downloads the package (and the lock) (managed identity for Azure Storage), checks it
#      against --package-sha256 and the lock, creates a new virtualenv
#      /opt/se-forwarder/versions/<stamp> and installs into it (every file hash-checked; from a
#      bundle with no index); the same package, lock and Python as the running version reuse
#      its virtualenv (a configuration change), unless --reinstall             (exit 11 if not)
#   4. writes /etc/se-forwarder/config.toml from the arguments (no secrets) and stores the
#      secrets given as systemd credentials (/etc/se-forwarder/credentials, root only, handed to
#      the service with LoadCredential=), validated with `se-forwarder check-config` by the NEW
#      version, as the service will see them, before anything is switched  (exit 2)
#   5. points /opt/se-forwarder/current at the new virtualenv, links /usr/local/bin/se-forwarder
#   6. installs the systemd unit (and the credentials drop-in), enables it and (re)starts it
#   7. waits until `se-forwarder status` reports the agent healthy (polling IMDS); if it does
#      not, rolls back to the previous version when there was one            (exit 13)
#   8. with --wait-delivery SEC, waits until every sink has delivered something (a record or the
#      start heartbeat)                                                      (exit 15 if not)
#   9. prints the sink warnings `se-forwarder status` reports (403 before a role assignment
#      applies, an unreachable endpoint...), whatever the outcome
# Concurrent runs are serialized with flock(1) on a lock in a root-only directory
# (/run/se-forwarder-install, never through a symbolic link); a virtualenv of a failed run is
# removed. URLs are printed and logged without their query string (a SAS token is a credential).
# Files are written with explicit modes whatever the caller's umask (027 on hardened images):
# the service's dynamic user must read the configuration and the virtualenv.
# The state directory (/var/lib/se-forwarder) is never touched by an install or upgrade.
#
# --collector installs `se-forwarder collect` instead (docs/collector.md: one place in the fleet,
# not every VM), the same way: the same /opt/se-forwarder virtualenvs (one package for both roles
# on a VM), its own unit se-forwarder-collector.service (sandboxed as the agent's:
# `install.sh --print-unit --collector`), its own configuration /etc/se-forwarder/collector.toml
# (from --config-file only: the [collector] section comes from the collector's Bicep output) and
# state /var/lib/se-forwarder-collector; the collector extra is required. Only the unit of the
# role named is stopped, started or removed; /opt is removed with the last role's unit.
#
# Options for images and tests:
#   --prefix DIR      relocate every path under DIR (config, state, unit, /opt, /usr/local/bin,
#                     /run); the config and unit written there name the relocated paths. Root
#                     not needed.
#   --no-systemd      install files only: no unit enabled or started, no health verification.
#   SE_FORWARDER_SYSTEMCTL=/path/to/systemctl   the service manager command to use.
#   SE_FORWARDER_OS_RELEASE=/path/to/os-release the distribution description to read.
set -Eeuo pipefail
# What this writes is read by the service's unprivileged dynamic user: modes are set explicitly
# below, and whatever is not (pip's files in the virtualenv) gets world-readable modes from here.
umask 022

readonly PROG="install.sh"
readonly MIN_PY_MINOR=11
DEFAULT_VERSION=""    # a release pipeline may bake the pinned version in here

die() { local code=$1; shift; printf '%s: ERROR: %s\n' "$PROG" "$*" >&2; exit "$code"; }
say() { printf '%s: %s\n' "$PROG" "$*"; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }

usage() {
  cat <<'EOF'
Usage: install.sh [options]                install or upgrade (run as root)
       install.sh --uninstall [--purge]    remove (state and config kept unless --purge)
       install.sh --print-unit             print the systemd unit and exit
       install.sh --collector ...          the same for the collector (se-forwarder collect)

Package (one of):
  --package SRC          an offline bundle (...tar.gz, from build-bundle.py: installed with no
                         package index), a wheel file, a wheel URL (https://...whl) or a project
                         directory (dev)
  --version V            se-forwarder==V from the index given with --index-url (required with
                         --version: only that index is used, pip's configured extra indexes
                         and find-links are ignored)
  --index-url URL        package index for --version (and for the dependencies)
  --package-sha256 HEX   expected sha256 of the bundle or wheel ('' = none)
  --lock SRC             dependency lock of a wheel (file or URL, from lock-dependencies.py): pip
                         installs in hash-checking mode, and the wheel must match the lock's own
                         hash ('' = none; a bundle carries its own)
  --reinstall            build a new virtualenv even when the package, lock and Python are the
                         running version's
  --download-identity M  how URLs are fetched: auto (default: the managed identity for Azure
                         Storage blob URLs without a SAS), managed (always), none (never)
  --extras LIST          pip extras, default "azure" ("azure,collector" with --collector); "none"
                         for none

Configuration (written to /etc/se-forwarder/config.toml; kept as is on an upgrade that gives none):
  --logs-endpoint URL    Logs Ingestion endpoint (DCE or DCR endpoint)
  --dcr-id ID            Data Collection Rule immutable id (dcr-...)
  --records-stream S     default Custom-ScheduledEvents
  --heartbeats-stream S  default Custom-ScheduledEventsAgent
  --eventhubs-namespace NS   e.g. myns.servicebus.windows.net
  --eventhub NAME        default scheduled-events
  --client-id ID         client id of a user-assigned managed identity (default: system-assigned);
                         also the download identity. With --collector it is the download
                         identity only (the collector's [identity] comes from its --config-file)
  --download-client-id ID  client id of the identity that downloads the package (default: the
                         --client-id; on a VM with several user-assigned identities IMDS refuses
                         a token without one)
  --eventhubs-connection-string-file FILE
                         authenticate to Event Hubs with the connection string in FILE instead of
                         the identity: stored as the systemd credential
                         eventhubs-connection-string (the namespace comes from the string)
  --webhook-url-file FILE  notifications: the webhook URL (a secret) in FILE, stored as the
                         systemd credential webhook-url; needs the webhook extra
  --webhook-url-env VAR  the same, from the environment variable VAR (what the Run Command's
                         protected parameter SE_INSTALL_WEBHOOK_URL and the extension's protected
                         command pass: never on a command line)
  --webhook-format F     json (default), slack or teams
  --tags LIST            VM tag names the agent records on every row (agent.tags), comma-separated,
                         e.g. service,env: the fleet view groups services by one of them
  --policy-preset NAME   [policy] preset: observe (the default: changes nothing) or microsoft
  --policy-rules JSON    [[policy.rules]] after the preset's, as a JSON array of rule objects
                         (docs/policy.md), e.g. '[{"name": "x", "event_types": ["Reboot"],
                         "approve": "at-once"}]'
  --credential NAME=FILE store FILE as the systemd credential NAME (repeatable): root-only under
                         /etc/se-forwarder/credentials, handed to the service with LoadCredential=
                         (it reads $CREDENTIALS_DIRECTORY/NAME; a config names it as
                         url_credential / connection_string_credential, or a hook's
                         env_credentials = { VARIABLE = "NAME" }). Delete FILE afterwards
  --file-sink PATH       also write records as JSON Lines to PATH
  --stdout-sink          also write records to stdout (the journal)
  --imds-endpoint URL    default http://169.254.169.254
  --config-file FILE     use this config file instead of generating one
  --from-env             also read the options above from SE_INSTALL_<OPTION> environment
                         variables (SE_INSTALL_PACKAGE, SE_INSTALL_LOGS_ENDPOINT, ...; options on
                         the command line win): how Azure Run Command passes named parameters

Role:
  --collector            install, print (--print-unit) or remove (--uninstall) the collector
                         (`se-forwarder collect`, unit se-forwarder-collector.service) instead
                         of the agent: its configuration is --config-file FILE (written to
                         /etc/se-forwarder/collector.toml; [agent] state_dir must be
                         /var/lib/se-forwarder-collector, the one directory its unit may write),
                         its extras must include collector (default azure,collector)

Behaviour:
  --dry-run              check everything and print the configuration and what would change,
                         changing nothing: the package is downloaded, checked and installed into a
                         temporary virtualenv whose check-config validates the configuration
  --python PATH          Python >= 3.11 to build the virtualenv with (default: the first of
                         python3, python3.13, python3.12, python3.11 with venv)
  --install-prerequisites  when no usable Python is found, install the distribution's (apt-get,
                         dnf or tdnf; what the Run Command and the extension pass)
  --verify-timeout SEC   how long to wait for a healthy agent (default 180: the first IMDS call
                         may take up to 2 minutes)
  --skip-imds-check      do not check IMDS first (image builds outside Azure)
  --prefix DIR           relocate all paths under DIR (tests, images); root not required
  --no-systemd           do not install/start the service nor verify it
  --wait-delivery SEC    after the agent is healthy, also wait up to SEC seconds until every sink
                         has delivered something (a record or the start heartbeat); exit 15 if not
                         (role assignments can take minutes to apply: 300 is a reasonable value)

Exit status: 0 installed and polling; 2 usage or bad configuration; 10 no usable Python (or none
the bundle has wheels for);
11 package install failed (index/network/file); 12 IMDS unreachable; 13 service not healthy;
14 service manager failed; 15 nothing delivered within --wait-delivery; 1 anything else.
EOF
}

print_unit() {
  cat <<'UNIT'
# se-forwarder: forwards Azure IMDS Scheduled Events to Log Analytics / Event Hubs.
# Installed by infra/scripts/install.sh (which carries an identical copy: `install.sh --print-unit`).
# Local changes belong in a drop-in: systemctl edit se-forwarder
[Unit]
Description=Azure Scheduled Events forwarder (se-forwarder)
Documentation=https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events
Wants=network-online.target
After=network-online.target
# Never give up restarting (the backoff below spaces the attempts).
StartLimitIntervalSec=0

[Service]
Type=exec
ExecStart=/opt/se-forwarder/current/bin/se-forwarder run --config /etc/se-forwarder/config.toml
Environment=PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# IMDS (169.254.169.254) must never be reached through a proxy; the agent ignores proxies for
# it, and NO_PROXY is a second guard for anything else that reads the environment.
Environment=NO_PROXY=169.254.169.254 no_proxy=169.254.169.254
Restart=always
RestartSec=5s
# Graceful stop: SIGTERM, the agent flushes and writes status.json with stopped=true.
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec=30s
TimeoutStartSec=30s

# Identity and files
DynamicUser=yes
StateDirectory=se-forwarder
StateDirectoryMode=0750
# A tmpfs under /run for the second copy of status.json ($RUNTIME_DIRECTORY): `status`
# still tells when the state directory's disk is full or read-only.
RuntimeDirectory=se-forwarder
RuntimeDirectoryMode=0750
WorkingDirectory=/var/lib/se-forwarder
UMask=0077
# Secrets (a webhook URL, an Event Hubs connection string) are systemd credentials, never files
# the dynamic user would have to read: install.sh --credential NAME=FILE stores them root-only in
# /etc/se-forwarder/credentials and writes LoadCredential=NAME:... into the drop-in
# se-forwarder.service.d/credentials.conf; the agent reads $CREDENTIALS_DIRECTORY/NAME.

# Sandbox
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
PrivateTmp=yes
PrivateDevices=yes
PrivateUsers=yes
PrivateIPC=yes
PrivateMounts=yes
ProtectSystem=strict
ProtectHome=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
RemoveIPC=yes
KeyringMode=private
DevicePolicy=closed
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources @mount @swap @reboot @raw-io @module @debug @cpu-emulation @obsolete @clock
SystemCallErrorNumber=EPERM
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
# Only unicast IP: IMDS (link-local 169.254.169.254), the Azure DNS/wire server and the public
# Azure endpoints stay reachable; multicast and other link-local peers do not.
IPAddressAllow=169.254.169.254
IPAddressDeny=multicast link-local

[Install]
WantedBy=multi-user.target
UNIT
}

print_collector_unit() {
  cat <<'UNIT'
# se-forwarder-collector: `se-forwarder collect`, Azure's own record of every VM's maintenance
# (Event Grid through an Event Hub, Resource Graph) into the same sinks as the agents. One per
# fleet (or per subscription), not on every VM: see docs/collector.md.
# Installed by infra/scripts/install.sh --collector (which carries an identical copy:
# `install.sh --print-unit --collector`), with its configuration /etc/se-forwarder/collector.toml.
# Sandboxed as the agent's unit (se-forwarder.service); tests/infra/test_systemd.py holds the two
# alike. Local changes belong in a drop-in: systemctl edit se-forwarder-collector
[Unit]
Description=Azure Scheduled Events collector (se-forwarder collect)
Documentation=https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events
Wants=network-online.target
After=network-online.target
# Never give up restarting (the backoff below spaces the attempts).
StartLimitIntervalSec=0

[Service]
Type=exec
ExecStart=/opt/se-forwarder/current/bin/se-forwarder collect --config /etc/se-forwarder/collector.toml
Environment=PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# IMDS (169.254.169.254) serves the collector's managed-identity tokens and must never be reached
# through a proxy; NO_PROXY guards everything that reads the environment.
Environment=NO_PROXY=169.254.169.254 no_proxy=169.254.169.254
Restart=always
RestartSec=5s
# Graceful stop: SIGTERM, the collector stops reading, flushes (stop_flush_seconds) and writes
# status.json with stopped=true. Killed instead, it loses nothing: the hub's checkpoint moves only
# after the outbox commit.
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec=30s
TimeoutStartSec=30s

# Identity and files
DynamicUser=yes
StateDirectory=se-forwarder-collector
StateDirectoryMode=0750
RuntimeDirectory=se-forwarder-collector
RuntimeDirectoryMode=0750
WorkingDirectory=/var/lib/se-forwarder-collector
UMask=0077
# [agent] state_dir = "/var/lib/se-forwarder-collector" in collector.toml (its own outbox and
# remembered ids, apart from an agent's on the same VM). Secrets as for the agent: systemd
# credentials (LoadCredential= in a drop-in), read from $CREDENTIALS_DIRECTORY.

# Sandbox
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
PrivateTmp=yes
PrivateDevices=yes
PrivateUsers=yes
PrivateIPC=yes
PrivateMounts=yes
ProtectSystem=strict
ProtectHome=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
RemoveIPC=yes
KeyringMode=private
DevicePolicy=closed
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources @mount @swap @reboot @raw-io @module @debug @cpu-emulation @obsolete @clock
SystemCallErrorNumber=EPERM
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
# Only unicast IP: IMDS (link-local 169.254.169.254), the Azure DNS/wire server, the public Azure
# endpoints (Event Hubs AMQP 5671, Blob Storage, Resource Graph, Logs Ingestion) and private
# endpoints stay reachable; multicast and other link-local peers do not.
IPAddressAllow=169.254.169.254
IPAddressDeny=multicast link-local

[Install]
WantedBy=multi-user.target
UNIT
}

# ---------------------------------------------------------------------------------------------
# arguments

# --from-env: Azure Run Command passes named parameters as environment variables (and drops
# empty ones); only these options may come that way, and an unknown SE_INSTALL_ name is an error.
readonly ENV_OPTIONS="package package-sha256 lock index-url extras download-identity logs-endpoint
  dcr-id records-stream heartbeats-stream eventhubs-namespace eventhub client-id file-sink
  verify-timeout wait-delivery download-client-id tags policy-preset policy-rules webhook-format"
env_arguments() {
  local opt var known=" RUN_ID PREREQUISITES WEBHOOK_URL "
  for opt in $ENV_OPTIONS; do
    var="SE_INSTALL_$(printf '%s' "$opt" | tr 'a-z-' 'A-Z_')"
    known+="${var#SE_INSTALL_} "
    if [[ -n "${!var:-}" ]]; then ENV_ARGS+=("--$opt" "${!var}"); fi
  done
  # a secret (the Run Command's protected parameter): read from the environment, never an argument
  if [[ -n "${SE_INSTALL_WEBHOOK_URL:-}" ]]; then ENV_ARGS+=(--webhook-url-env SE_INSTALL_WEBHOOK_URL); fi
  case "${SE_INSTALL_PREREQUISITES:-}" in
    ""|no|false|0) ;;
    *) ENV_ARGS+=(--install-prerequisites) ;;
  esac
  for var in $(compgen -e | grep '^SE_INSTALL_' || true); do
    [[ "$known" == *" ${var#SE_INSTALL_} "* ]] || die 2 "unknown environment variable $var (--from-env)"
  done
}
ENV_ARGS=()
for a in "$@"; do
  if [[ "$a" == --from-env ]]; then env_arguments; break; fi
done
ARGS=()
for a in "$@"; do [[ "$a" == --from-env ]] || ARGS+=("$a"); done
set -- "${ENV_ARGS[@]}" "${ARGS[@]}"

ACTION=install PURGE=0 VERSION="$DEFAULT_VERSION" PACKAGE="" INDEX_URL="" EXTRAS="" ROLE=agent
PACKAGE_SHA256="" LOCK="" DOWNLOAD_IDENTITY=auto
LOGS_ENDPOINT="" DCR_ID="" RECORDS_STREAM="Custom-ScheduledEvents"
HEARTBEATS_STREAM="Custom-ScheduledEventsAgent" EH_NAMESPACE="" EH_NAME="scheduled-events"
CLIENT_ID="" FILE_SINK="" STDOUT_SINK=0 IMDS_ENDPOINT="http://169.254.169.254"
CONFIG_FILE="" PYTHON="" VERIFY_TIMEOUT=180 SKIP_IMDS=0 PREFIX="" NO_SYSTEMD=0 CONFIG_GIVEN=0
WAIT_DELIVERY=0 REINSTALL=0 PREREQUISITES=0 EH_CONN_FILE="" WEBHOOK_URL_FILE="" WEBHOOK_FORMAT=json
CREDENTIALS=()
DOWNLOAD_CLIENT_ID="" DOWNLOAD_CLIENT_ID_GIVEN=0 CLIENT_ID_GIVEN=0 TAGS="" POLICY_PRESET="" POLICY_RULES=""
DRY_RUN=0 WEBHOOK_ENV_FILE=""

need_arg() { [[ $# -ge 2 && -n "$2" ]] || die 2 "option $1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --print-unit) ACTION=print-unit ;;
    --collector) ROLE=collector ;;
    --uninstall) ACTION=uninstall ;;
    --purge) PURGE=1 ;;
    --version) need_arg "$@"; VERSION=$2; shift ;;
    --package) need_arg "$@"; PACKAGE=$2; shift ;;
    --index-url) need_arg "$@"; INDEX_URL=$2; shift ;;
    --package-sha256) [[ $# -ge 2 ]] || die 2 "option $1 needs a value ('' for none)"
                      PACKAGE_SHA256=$(printf '%s' "$2" | tr 'A-F' 'a-f'); shift ;;
    --lock) [[ $# -ge 2 ]] || die 2 "option $1 needs a value ('' for none)"; LOCK=$2; shift ;;
    --reinstall) REINSTALL=1 ;;
    --install-prerequisites) PREREQUISITES=1 ;;
    --download-identity) need_arg "$@"; DOWNLOAD_IDENTITY=$2; shift ;;
    --extras) need_arg "$@"; EXTRAS=$2; shift ;;
    --logs-endpoint) need_arg "$@"; LOGS_ENDPOINT=$2; CONFIG_GIVEN=1; shift ;;
    --dcr-id) need_arg "$@"; DCR_ID=$2; CONFIG_GIVEN=1; shift ;;
    --records-stream) need_arg "$@"; RECORDS_STREAM=$2; shift ;;
    --heartbeats-stream) need_arg "$@"; HEARTBEATS_STREAM=$2; shift ;;
    --eventhubs-namespace) need_arg "$@"; EH_NAMESPACE=$2; CONFIG_GIVEN=1; shift ;;
    --eventhub) need_arg "$@"; EH_NAME=$2; shift ;;
    --client-id) [[ $# -ge 2 ]] || die 2 "option $1 needs a value ('' for system-assigned)"
                 CLIENT_ID=$2; CLIENT_ID_GIVEN=1; shift ;;
    --download-client-id) need_arg "$@"; DOWNLOAD_CLIENT_ID=$2; DOWNLOAD_CLIENT_ID_GIVEN=1; shift ;;
    --tags) [[ $# -ge 2 ]] || die 2 "option $1 needs a value ('' for none)"; TAGS=$2; CONFIG_GIVEN=1; shift ;;
    --policy-preset) [[ $# -ge 2 ]] || die 2 "option $1 needs a value ('' for the default)"
                     POLICY_PRESET=$2; CONFIG_GIVEN=1; shift ;;
    --policy-rules) [[ $# -ge 2 ]] || die 2 "option $1 needs a value ('' for none)"
                    POLICY_RULES=$2; CONFIG_GIVEN=1; shift ;;
    --webhook-url-env) need_arg "$@"; [[ "$2" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die 2 "--webhook-url-env takes a variable name"
                       [[ -n "${!2:-}" ]] || die 2 "--webhook-url-env $2: the variable is empty or not set"
                       WEBHOOK_ENV_FILE=$(umask 077; mktemp); printf '%s\n' "${!2}" >"$WEBHOOK_ENV_FILE"
                       WEBHOOK_URL_FILE=$WEBHOOK_ENV_FILE; CONFIG_GIVEN=1
                       CREDENTIALS+=("webhook-url=$WEBHOOK_ENV_FILE"); shift ;;
    --dry-run) DRY_RUN=1 ;;
    --file-sink) need_arg "$@"; FILE_SINK=$2; CONFIG_GIVEN=1; shift ;;
    --eventhubs-connection-string-file) need_arg "$@"; EH_CONN_FILE=$2; CONFIG_GIVEN=1
                                        CREDENTIALS+=("eventhubs-connection-string=$2"); shift ;;
    --webhook-url-file) need_arg "$@"; WEBHOOK_URL_FILE=$2; CONFIG_GIVEN=1
                        CREDENTIALS+=("webhook-url=$2"); shift ;;
    --webhook-format) need_arg "$@"; WEBHOOK_FORMAT=$2; shift ;;
    --credential) need_arg "$@"; CREDENTIALS+=("$2"); shift ;;
    --stdout-sink) STDOUT_SINK=1; CONFIG_GIVEN=1 ;;
    --imds-endpoint) need_arg "$@"; IMDS_ENDPOINT=${2%/}; shift ;;
    --config-file) need_arg "$@"; CONFIG_FILE=$2; shift ;;
    --python) need_arg "$@"; PYTHON=$2; shift ;;
    --verify-timeout) need_arg "$@"; VERIFY_TIMEOUT=$2; shift ;;
    --skip-imds-check) SKIP_IMDS=1 ;;
    --prefix) need_arg "$@"; PREFIX=${2%/}; shift ;;
    --no-systemd) NO_SYSTEMD=1 ;;
    --wait-delivery) need_arg "$@"; WAIT_DELIVERY=$2; shift ;;
    *) usage >&2; die 2 "unknown argument: $1" ;;
  esac
  shift
done

# the webhook URL taken from the environment lives in a root-only file until it is stored
trap 'rm -f "${WEBHOOK_ENV_FILE:-/nonexistent}"' EXIT
# the download identity is its own option; --client-id is also the agent's [identity]
[[ $DOWNLOAD_CLIENT_ID_GIVEN -eq 1 ]] || DOWNLOAD_CLIENT_ID=$CLIENT_ID
if [[ $CLIENT_ID_GIVEN -eq 1 && $ROLE == agent ]]; then CONFIG_GIVEN=1; fi
# a webhook needs its extra: the default extras take it (an explicit --extras is checked below)
if [[ -n "$WEBHOOK_URL_FILE" && -z "$EXTRAS" && $ROLE == agent ]]; then EXTRAS=azure,webhook; fi
[[ "$VERIFY_TIMEOUT" =~ ^[0-9]+$ ]] || die 2 "--verify-timeout must be a whole number of seconds"
[[ "$WAIT_DELIVERY" =~ ^[0-9]+$ ]] || die 2 "--wait-delivery must be a whole number of seconds"
[[ $PURGE -eq 0 || $ACTION == uninstall ]] || die 2 "--purge only goes with --uninstall"
if [[ $ACTION == print-unit ]]; then
  if [[ $ROLE == collector ]]; then print_collector_unit; else print_unit; fi
  exit 0
fi
if [[ -n "$PREFIX" ]]; then
  mkdir -p "$PREFIX" || die 1 "cannot create prefix $PREFIX"
  PREFIX=$(cd "$PREFIX" && pwd)
fi

OPT="$PREFIX/opt/se-forwarder"
ETC="$PREFIX/etc/se-forwarder"
UNIT_DIR="$PREFIX/etc/systemd/system"
if [[ $ROLE == collector ]]; then
  SERVICE=se-forwarder-collector OTHER_SERVICE=se-forwarder WHAT="the collector"
  CONFIG="$ETC/collector.toml"
  STATE="$PREFIX/var/lib/se-forwarder-collector"
  EXTRAS=${EXTRAS:-azure,collector}
else
  SERVICE=se-forwarder OTHER_SERVICE=se-forwarder-collector WHAT="the agent"
  CONFIG="$ETC/config.toml"
  STATE="$PREFIX/var/lib/se-forwarder"
  EXTRAS=${EXTRAS:-azure}
fi
UNIT_FILE="$UNIT_DIR/$SERVICE.service"
BIN_LINK="$PREFIX/usr/local/bin/se-forwarder"
SYSTEMCTL="${SE_FORWARDER_SYSTEMCTL:-systemctl}"

if [[ -z "$PREFIX" && $EUID -ne 0 ]]; then
  die 1 "run as root (or use --prefix DIR for an unprivileged install into DIR)"
fi

# One installer at a time (cloud-init retries, an extension re-run and an operator can overlap).
# The lock lives in a directory only root can write (never the world-writable /run/lock, where any
# local user could hold it and block every upgrade), and is never opened through a symbolic link.
INSTALL_LOCK_DIR="$PREFIX/run/se-forwarder-install"
INSTALL_LOCK="$INSTALL_LOCK_DIR/lock"
LOCK_WAIT="${SE_FORWARDER_INSTALL_LOCK_WAIT:-600}"
take_install_lock() {
  local owner_mode
  mkdir -p "$(dirname "$INSTALL_LOCK_DIR")"
  mkdir -m 0700 "$INSTALL_LOCK_DIR" 2>/dev/null || true
  [[ -d "$INSTALL_LOCK_DIR" && ! -L "$INSTALL_LOCK_DIR" ]] ||
    die 1 "$INSTALL_LOCK_DIR is not a directory (or is a symbolic link): remove it"
  owner_mode=$(stat -c '%u %a' "$INSTALL_LOCK_DIR")
  [[ "${owner_mode% *}" == "$EUID" ]] ||
    die 1 "$INSTALL_LOCK_DIR belongs to uid ${owner_mode% *}, not to uid $EUID: remove it"
  chmod 0700 "$INSTALL_LOCK_DIR"
  [[ ! -L "$INSTALL_LOCK" ]] || die 1 "$INSTALL_LOCK is a symbolic link: remove it"
  [[ ! -e "$INSTALL_LOCK" || -f "$INSTALL_LOCK" ]] || die 1 "$INSTALL_LOCK is not a regular file"
  exec 9>>"$INSTALL_LOCK"
  if ! flock -n 9; then
    say "another install.sh is running; waiting up to ${LOCK_WAIT}s for it"
    flock -w "$LOCK_WAIT" 9 || die 1 "another install.sh is still running (lock $INSTALL_LOCK held for ${LOCK_WAIT}s)"
  fi
}
if command -v flock >/dev/null 2>&1; then
  take_install_lock
else
  warn "flock not found: concurrent runs of install.sh are not prevented"
fi

# URLs without their query string (a SAS token) and user info, for messages and the log.
redact() {
  sed -E -e 's#(https?://)[^/@[:space:]]+@#\1***@#g' \
         -e 's#(https?://[^?#[:space:]]*)\?[^#[:space:]]*#\1?***#g' \
         -e 's#(\.whl)\?[^[:space:]]*#\1?***#g' \
         -e 's#\?([^[:space:]]*[&?])?sig=[^[:space:]]*#?***#g'
}
redact_str() { printf '%s' "$1" | redact; }

on_err() { printf '%s: ERROR: unexpected failure (exit %s) at line %s: %s\n' "$PROG" "$1" "$2" "$3" >&2; }
trap 'on_err $? $LINENO "$BASH_COMMAND"' ERR

sysctl_() {
  # the service manager, unless --no-systemd
  [[ $NO_SYSTEMD -eq 1 ]] && return 0
  "$SYSTEMCTL" "$@"
}

have_systemd() {
  [[ $NO_SYSTEMD -eq 1 ]] && return 1
  [[ -n "${SE_FORWARDER_SYSTEMCTL:-}" ]] && return 0
  [[ -d /run/systemd/system ]]
}

# ---------------------------------------------------------------------------------------------
# uninstall

if [[ $ACTION == uninstall ]]; then
  if [[ -f "$UNIT_FILE" ]] && have_systemd; then
    say "stopping and disabling $SERVICE.service"
    sysctl_ disable --now "$SERVICE.service" || warn "could not stop/disable the service"
  fi
  rm -f "$UNIT_FILE"
  rm -rf "$UNIT_DIR/$SERVICE.service.d"
  if have_systemd; then sysctl_ daemon-reload || warn "daemon-reload failed"; fi
  if [[ -f "$UNIT_DIR/$OTHER_SERVICE.service" ]]; then
    # the other role still runs from the same virtualenvs, configuration folder and credentials
    if [[ $PURGE -eq 1 ]]; then
      rm -rf "$CONFIG" "$STATE" "$PREFIX/var/lib/private/$SERVICE"
      say "removed $SERVICE, its configuration and its state; kept the package, used by $OTHER_SERVICE.service"
    else
      say "removed $SERVICE; kept the package (used by $OTHER_SERVICE.service), configuration $CONFIG and state $STATE (--purge removes them)"
    fi
    exit 0
  fi
  if [[ -L "$BIN_LINK" ]]; then rm -f "$BIN_LINK"; fi
  rm -rf "$OPT"
  if [[ $PURGE -eq 1 ]]; then
    rm -rf "$ETC" "$STATE" "$PREFIX/var/lib/private/$SERVICE"
    say "removed $SERVICE, its configuration and its state"
  else
    say "removed $SERVICE; kept configuration $ETC and state $STATE (--purge removes them)"
  fi
  exit 0
fi

# ---------------------------------------------------------------------------------------------
# install: checks first, nothing changed yet

[[ -n "$VERSION" || -n "$PACKAGE" ]] || die 2 "give --package WHEEL|URL (a wheel you control) or --version V with --index-url URL"
[[ -z "$VERSION" || -z "$PACKAGE" ]] || die 2 "give either --version or --package, not both"
if [[ -n "$VERSION" && ! "$VERSION" =~ ^[0-9]+(\.[0-9]+)*([abc]|rc|\.post|\.dev)?[0-9]*$ ]]; then
  die 2 "--version must be an exact version like 1.2.3 (got '$VERSION')"
fi
if [[ -n "$VERSION" && -z "$INDEX_URL" ]]; then
  die 2 "--version needs --index-url: se-forwarder is not on the public index, and a name anyone can register there is never installed from it (or give --package WHEEL|URL)"
fi
[[ -z "$PACKAGE_SHA256" || "$PACKAGE_SHA256" =~ ^[0-9a-f]{64}$ ]] || die 2 "--package-sha256 must be 64 hex digits"
[[ -z "$PACKAGE_SHA256" || -n "$PACKAGE" ]] || die 2 "--package-sha256 goes with --package (with --version, the lock pins the wheel's hash)"
if [[ "${PACKAGE%%\?*}" == *.tar.gz ]]; then
  BUNDLE=1
  [[ -z "$LOCK" ]] || die 2 "--lock goes with a wheel: a bundle carries one lock per Python version and architecture"
  [[ -z "$INDEX_URL" ]] || die 2 "--index-url goes with --version or a wheel: a bundle is installed with no package index"
else
  BUNDLE=0
fi
case "$DOWNLOAD_IDENTITY" in auto|managed|none) ;; *) die 2 "--download-identity must be auto, managed or none" ;; esac
for src in "$PACKAGE" "$LOCK"; do
  case "$src" in
    http://127.0.0.1[:/]*|http://localhost[:/]*|https://*|"") ;;
    http://*) die 2 "$(redact_str "$src"): a package or lock URL must be https:// (plain http only to this machine)" ;;
  esac
done
if [[ -n "$LOGS_ENDPOINT" || -n "$DCR_ID" ]]; then
  [[ -n "$LOGS_ENDPOINT" && -n "$DCR_ID" ]] || die 2 "--logs-endpoint and --dcr-id go together"
  [[ "$LOGS_ENDPOINT" == https://* ]] || die 2 "--logs-endpoint must be an https:// URL"
fi
[[ -z "$CONFIG_FILE" || -r "$CONFIG_FILE" ]] || die 2 "cannot read --config-file $CONFIG_FILE"
[[ -z "$CONFIG_FILE" || $CONFIG_GIVEN -eq 0 ]] || die 2 "--config-file excludes the sink/identity options"
if [[ $ROLE == collector ]]; then
  [[ $CONFIG_GIVEN -eq 0 ]] ||
    die 2 "--collector takes its configuration from --config-file (the [identity] and [collector] sections the collector's Bicep prints, plus [agent] and [sinks.*]: docs/collector.md)"
  [[ -n "$CONFIG_FILE" || -f "$CONFIG" ]] || die 2 "--collector needs --config-file FILE (written to $CONFIG)"
  [[ ",${EXTRAS// /}," == *,collector,* ]] ||
    die 2 "--collector needs the collector extra: --extras azure,collector (and a bundle or lock made with it)"
  [[ $WAIT_DELIVERY -eq 0 ]] ||
    die 2 "--wait-delivery is the agent's (its start heartbeat): the collector sends nothing until Azure reports an event"
fi
if [[ -z "$CONFIG_FILE" && $CONFIG_GIVEN -eq 1 ]]; then
  [[ -n "$LOGS_ENDPOINT" || -n "$EH_NAMESPACE" || -n "$EH_CONN_FILE" || -n "$FILE_SINK" || $STDOUT_SINK -eq 1 ||
     -n "$WEBHOOK_URL_FILE" ]] ||
    die 2 "no sink: give --logs-endpoint/--dcr-id, --eventhubs-namespace, --file-sink or --stdout-sink"
elif [[ -z "$CONFIG_FILE" && ! -f "$CONFIG" ]]; then
  die 2 "no configuration: give a sink (--logs-endpoint/--dcr-id, --eventhubs-namespace, --file-sink, --stdout-sink) or --config-file"
fi
case "$IMDS_ENDPOINT" in http://*|https://*) ;; *) die 2 "--imds-endpoint must be an http(s) URL" ;; esac
[[ -z "$EH_CONN_FILE" || -z "$EH_NAMESPACE" ]] || die 2 "--eventhubs-connection-string-file names the namespace itself: leave out --eventhubs-namespace"
case "$WEBHOOK_FORMAT" in json|slack|teams) ;; *) die 2 "--webhook-format must be json, slack or teams" ;; esac
case "$POLICY_PRESET" in ""|observe|microsoft) ;; *) die 2 "--policy-preset must be observe or microsoft (got '$POLICY_PRESET')" ;; esac
[[ -z "$POLICY_RULES" || "$POLICY_RULES" =~ ^[[:space:]]*\[ ]] || die 2 "--policy-rules takes a JSON array of rule objects: '[{\"event_types\": [\"Reboot\"], ...}]'"
TAG_NAMES=()
if [[ -n "$TAGS" ]]; then
  IFS=, read -r -a TAG_NAMES <<<"$TAGS"
  for t in "${TAG_NAMES[@]}"; do
    [[ -n "$t" && "$t" == "${t#[[:space:]]}" && "$t" == "${t%[[:space:]]}" ]] || die 2 "--tags: an empty tag name, or one with leading or trailing spaces, in '$TAGS'"
    [[ "$t" != *[\<\>%\&\\?/]* ]] || die 2 "--tags: Azure tag names cannot hold < > % & \\ ? / ('$t')"
  done
  [[ ${#TAG_NAMES[@]} -le 10 ]] || die 2 "--tags: at most 10 tag names (got ${#TAG_NAMES[@]})"
fi
if [[ -n "$WEBHOOK_URL_FILE" && ",$EXTRAS," != *,webhook,* ]]; then
  die 2 "--webhook-url-file needs the webhook extra: --extras azure,webhook (and a bundle or lock made with it)"
fi
CREDENTIAL_NAMES=()
for c in "${CREDENTIALS[@]}"; do
  name=${c%%=*} src=${c#*=}
  [[ "$c" == *=* && "$name" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$ ]] ||
    die 2 "--credential takes NAME=FILE, NAME of letters, digits, '_', '.', '-' (got '${c%%=*}')"
  [[ -f "$src" && -r "$src" ]] || die 2 "credential $name: cannot read $src"
  [[ -s "$src" ]] || die 2 "credential $name: $src is empty"
  [[ " ${CREDENTIAL_NAMES[*]} " != *" $name "* ]] || die 2 "credential $name is given twice"
  CREDENTIAL_NAMES+=("$name")
done
for v in "$LOGS_ENDPOINT" "$DCR_ID" "$RECORDS_STREAM" "$HEARTBEATS_STREAM" "$EH_NAMESPACE" "$EH_NAME" \
         "$CLIENT_ID" "$FILE_SINK" "$IMDS_ENDPOINT" "$PREFIX" "$PACKAGE" "$LOCK" "$INDEX_URL" \
         "$EH_CONN_FILE" "$WEBHOOK_URL_FILE" "$PYTHON" "$TAGS" "$POLICY_PRESET" "$POLICY_RULES" \
         "$DOWNLOAD_CLIENT_ID"; do
  [[ "$v" != *[$'\x01'-$'\x1f\x7f']* ]] || die 2 "control character in an argument: $(printf '%q' "$v")"
done

# 1. Python: the given one, else the first usable of python3, python3.13, python3.12, python3.11
python_version_ok() { "$1" -c "import sys; sys.exit(0 if sys.version_info >= (3, $MIN_PY_MINOR) else 1)" 2>/dev/null; }
python_venv_ok() { "$1" -c "import venv, ensurepip" 2>/dev/null; }
find_python() {
  local c p
  for c in python3 python3.13 python3.12 python3.11; do
    p=$(command -v "$c" 2>/dev/null) || continue
    if python_version_ok "$p" && python_venv_ok "$p"; then PYTHON=$p; return 0; fi
  done
  return 1
}
os_release() {
  # ID VERSION_ID ID_LIKE of this distribution (SE_FORWARDER_OS_RELEASE for tests)
  local f="${SE_FORWARDER_OS_RELEASE:-/etc/os-release}"
  [[ -r "$f" ]] || { echo "unknown"; return; }
  ( . "$f"; printf '%s %s %s\n' "${ID:-unknown}" "${VERSION_ID:-}" "${ID_LIKE:-}" )
}
python_hint() {
  # exactly what to install on this distribution (docs/install.md, "Supported systems")
  local id version like
  read -r id version like <<<"$(os_release)"
  case "$id:$version" in
    debian:1[2-9]*|ubuntu:2[4-9].*|ubuntu:[3-9]*) echo "apt-get install python3 python3-venv" ;;
    debian:*) echo "Debian $version ships a Python older than 3.$MIN_PY_MINOR: use Debian 12 or later" ;;
    ubuntu:*) echo "Ubuntu $version ships a Python older than 3.$MIN_PY_MINOR: use Ubuntu 24.04 or later" ;;
    rhel:9*|almalinux:9*|rocky:9*|ol:9*|centos:9*|rhel:1*|almalinux:1*|rocky:1*|ol:1*)
      echo "dnf install python3.11" ;;
    rhel:*|almalinux:*|rocky:*|ol:*|centos:*) echo "$id $version has no Python 3.$MIN_PY_MINOR package: use version 9 or later" ;;
    azurelinux:*|mariner:*) echo "tdnf install python3" ;;
    sles:*|opensuse-leap:*) echo "zypper install python311" ;;
    *) echo "Python 3.$MIN_PY_MINOR or newer with its venv module from your distribution (supported: Debian 12, Ubuntu 24.04, RHEL/AlmaLinux/Rocky 9, Azure Linux 3)" ;;
  esac
}
install_python() {
  # --install-prerequisites: the distribution's Python, only when none is usable
  local id version like
  read -r id version like <<<"$(os_release)"
  say "no usable Python 3.$MIN_PY_MINOR+ with venv: installing the distribution's ($id $version)"
  case "$id $like" in
    debian*|ubuntu*|*" debian"*)
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q >>"$PREREQ_LOG" 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q python3 python3-venv >>"$PREREQ_LOG" 2>&1 ;;
    rhel*|almalinux*|rocky*|ol*|centos*|*" rhel"*|*" fedora"*) dnf install -y -q python3.11 >>"$PREREQ_LOG" 2>&1 ;;
    azurelinux*|mariner*) tdnf install -y -q python3 >>"$PREREQ_LOG" 2>&1 ;;
    *) return 1 ;;
  esac
}
if [[ -z "$PYTHON" ]] && ! find_python; then
  PREREQ_LOG=$(mktemp)
  if [[ $PREREQUISITES -eq 1 ]] && install_python && find_python; then
    say "installed $("$PYTHON" -V 2>&1) at $PYTHON"
  else
    [[ $PREREQUISITES -eq 0 ]] || tail -n 5 "$PREREQ_LOG" >&2
    die 10 "no Python 3.$MIN_PY_MINOR+ with venv found (python3, python3.13, python3.12, python3.11): on this system, $(python_hint); or pass --python PATH"
  fi
  rm -f "$PREREQ_LOG"
fi
[[ -x "$PYTHON" ]] || PYTHON=$(command -v "$PYTHON" || true)
[[ -n "$PYTHON" && -x "$PYTHON" ]] || die 10 "Python not found or not executable: ${PYTHON:-(none)}"
if ! python_version_ok "$PYTHON"; then
  die 10 "$PYTHON is $("$PYTHON" -V 2>&1 || echo 'not runnable'); se-forwarder needs Python 3.${MIN_PY_MINOR}+: on this system, $(python_hint)"
fi
if ! python_venv_ok "$PYTHON"; then
  die 10 "$PYTHON cannot create virtualenvs: on this system, $(python_hint)"
fi
# The service runs as a dynamic user in a sandbox (ProtectHome=yes): the virtualenv's interpreter
# is this one (a venv links to it), so it and its standard library must be usable by others and
# outside /root, /home and /run/user. A pyenv or conda interpreter under root's home directory is
# the usual case: refused here, not found out when the unit fails to start.
python_service_problem() {
  "$1" - <<'PY'
import os, stat, sys
hidden = ("/root", "/home", "/run/user")
checks = [(os.path.realpath(sys.executable), stat.S_IXOTH, "run"),
          (os.path.realpath(os.__file__), stat.S_IROTH, "read its standard library")]
for path, bit, what in checks:
    for root in hidden:
        if path == root or path.startswith(root + "/"):
            sys.exit(f"{path} is under {root}, which the service's sandbox hides (ProtectHome=yes): it cannot {what}")
    mode = os.stat(path).st_mode
    if not mode & bit:
        sys.exit(f"{path} is mode {stat.S_IMODE(mode):04o}: the service's user cannot {what}")
    parent = os.path.dirname(path)
    while True:
        mode = os.stat(parent).st_mode
        if not mode & stat.S_IXOTH:
            sys.exit(f"{parent} is mode {stat.S_IMODE(mode):04o}: the service's user cannot enter it to {what} ({path})")
        if parent == "/":
            break
        parent = os.path.dirname(parent)
PY
}
if ! why=$(python_service_problem "$PYTHON" 2>&1); then
  die 10 "$PYTHON cannot be the service's interpreter: $why. Install the distribution's Python ($(python_hint)) or pass --python with one every user can run"
fi
say "using $("$PYTHON" -V 2>&1) at $PYTHON"
# --policy-rules (JSON) as [[policy.rules]] tables, with the interpreter found above: JSON that is
# not an array of rule objects is refused now, not after the download and the virtualenv;
# check-config then validates every rule as `run` would
RULES_TOML=""
if [[ -n "$POLICY_RULES" ]]; then
  if ! RULES_TOML=$("$PYTHON" - "$POLICY_RULES" <<'PY' 2>&1
import json, re, sys
try:
    rules = json.loads(sys.argv[1])
except ValueError as exc:
    sys.exit(f"not JSON: {exc}")
if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
    sys.exit("a JSON array of rule objects is expected")

def key(k):
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k, ensure_ascii=False)

def value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items() if x is not None) + "}"
    sys.exit(f"cannot write {v!r} in TOML")

out = []
for rule in rules:
    out.append("\n[[policy.rules]]")
    out += [f"{key(k)} = {value(v)}" for k, v in rule.items() if v is not None]
print("\n".join(out).lstrip("\n"))
PY
  ); then
    die 2 "--policy-rules: $RULES_TOML"
  fi
fi

# 2. IMDS, directly: proxies explicitly disabled, whatever HTTP(S)_PROXY say
check_imds() {
  "$PYTHON" - "$IMDS_ENDPOINT" <<'PY'
import sys, urllib.request, urllib.error
base = sys.argv[1]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
req = urllib.request.Request(base + "/metadata/instance?api-version=2021-02-01",
                             headers={"Metadata": "true"})
last = None
for attempt in range(3):
    try:
        with opener.open(req, timeout=5) as resp:
            print(f"IMDS answered HTTP {resp.status}")
            sys.exit(0)
    except urllib.error.HTTPError as e:   # an answer, so IMDS is reachable
        print(f"IMDS answered HTTP {e.code}")
        sys.exit(0)
    except Exception as e:
        last = e
print(f"no answer from {base}: {last}", file=sys.stderr)
sys.exit(1)
PY
}
if [[ $SKIP_IMDS -eq 0 ]]; then
  if ! out=$(check_imds 2>&1); then
    die 12 "IMDS unreachable at $IMDS_ENDPOINT (${out}). The agent must run on an Azure VM (or give --imds-endpoint); IMDS is reached directly, never through a proxy: check that no firewall/iptables rule drops 169.254.169.254"
  fi
  say "IMDS reachable at $IMDS_ENDPOINT ($out)"
fi

# 3. the package: fetched (wheel and lock), checked, then installed into a fresh virtualenv (the
# running version is untouched until step 5)
# Both roles on one VM run from one virtualenv: it gets the union of the installed roles' extras
# (an agent upgraded through Azure, which names only its own, keeps the collector's packages; the
# collector's install keeps the agent's webhook). Each role's own extras are remembered beside
# the virtualenvs.
role_extras() {
  # the extras a role was installed with (before this was recorded: its defaults)
  local f="$OPT/extras.$1"
  if [[ -f "$f" ]]; then cat "$f"
  elif [[ $1 == se-forwarder-collector ]]; then echo azure,collector
  else echo azure
  fi
}
OWN_EXTRAS=$EXTRAS
if [[ -f "$UNIT_DIR/$OTHER_SERVICE.service" ]]; then
  union=()
  IFS=, read -r -a mine <<<"${EXTRAS// /}"
  IFS=, read -r -a theirs <<<"$(role_extras "$OTHER_SERVICE" | tr -d ' ')"
  for e in "${mine[@]}" "${theirs[@]}"; do
    [[ -n "$e" && "$e" != none && " ${union[*]} " != *" $e "* ]] && union+=("$e")
  done
  EXTRAS=$(IFS=,; printf '%s' "${union[*]:-none}")
  [[ "$EXTRAS" == "${OWN_EXTRAS// /}" ]] ||
    say "extras $EXTRAS: $OWN_EXTRAS for $WHAT and $(role_extras "$OTHER_SERVICE") for $OTHER_SERVICE.service, which runs from the same virtualenv"
fi
case "$EXTRAS" in none|"") EXTRAS_SPEC="" ;; *) EXTRAS_SPEC="[$EXTRAS]" ;; esac
STAMP="$(date -u +%Y%m%dT%H%M%SZ)-$$"
if [[ $DRY_RUN -eq 1 ]]; then
  # nothing under the prefix changes: the download and the trial virtualenv live in a
  # temporary directory, removed at exit
  DL=$(mktemp -d)
  NEW="$DL/venv"
  LOG="$DL/install.log"
else
  mkdir -p "$OPT/versions" "$ETC"
  chmod 0755 "$OPT" "$OPT/versions" "$ETC"
  NEW="$OPT/versions/$STAMP"
  DL="$OPT/downloads.$STAMP"
  LOG="$OPT/install.log"
fi
: >"$LOG"
REUSE=0
cleanup_new() { if [[ $REUSE -eq 0 ]]; then rm -rf "$NEW"; fi; }
# a failed run leaves no virtualenv behind, unless `current` points at it (a first install whose
# service failed: the files stay in place for a re-run); downloads never stay
INSTALL_DONE=0
on_exit() {
  rm -rf "${DL:-/nonexistent}"
  rm -f "${WEBHOOK_ENV_FILE:-/nonexistent}"
  if [[ $INSTALL_DONE -eq 0 && -n "${NEW:-}" && -d "$NEW" ]] &&
     [[ "$(readlink "$OPT/current" 2>/dev/null || true)" != "versions/$STAMP" ]]; then
    rm -rf "$NEW"
  fi
}
trap on_exit EXIT
mkdir -p "$DL" && chmod 0700 "$DL"
if [[ $DRY_RUN -eq 1 ]]; then chmod 0755 "$DL"; fi  # the trial virtualenv is checked as the service

fetch_url() {
  # URL DEST: GET with a managed-identity token for Azure Storage (IMDS reached directly, no
  # redirect followed with the token); the token is never printed
  "$PYTHON" - "$1" "$2" "$DOWNLOAD_IDENTITY" "$IMDS_ENDPOINT" "$DOWNLOAD_CLIENT_ID" <<'PY'
import json, re, sys, urllib.error, urllib.parse, urllib.request
url, dest, mode, imds, client_id = sys.argv[1:6]
parts = urllib.parse.urlsplit(url)
storage = re.search(r"\.blob\.(core\.windows\.net|core\.chinacloudapi\.cn|core\.usgovcloudapi\.net"
                    r"|storage\.azure\.net)$", parts.hostname or "")
use_identity = mode == "managed" or (mode == "auto" and storage and "sig=" not in parts.query)
headers = {}
if use_identity:
    q = {"api-version": "2018-02-01", "resource": "https://storage.azure.com/"}
    if client_id:
        q["client_id"] = client_id
    req = urllib.request.Request(f"{imds}/metadata/identity/oauth2/token?{urllib.parse.urlencode(q)}",
                                 headers={"Metadata": "true"})
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30) as r:
            token = json.load(r)["access_token"]
    except urllib.error.HTTPError as e:
        sys.exit(f"no managed-identity token for Azure Storage (IMDS: HTTP {e.code} "
                 f"{e.read(300).decode(errors='replace')})")
    except Exception as e:
        sys.exit(f"no managed-identity token for Azure Storage: {e}")
    headers = {"Authorization": f"Bearer {token}", "x-ms-version": "2023-11-03"}

class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None

try:
    opener = urllib.request.build_opener(NoRedirect) if headers else urllib.request.build_opener()
    with opener.open(urllib.request.Request(url, headers=headers), timeout=120) as r, \
            open(dest, "wb") as f:
        while chunk := r.read(1 << 16):
            f.write(chunk)
except urllib.error.HTTPError as e:
    hint = ""
    if e.code in (401, 403) and use_identity:
        who = f"the identity {client_id}" if client_id else "the VM's system-assigned identity"
        hint = f": give {who} Storage Blob Data Reader on the container"
    sys.exit(f"HTTP {e.code} {e.reason}{hint}")
except Exception as e:
    sys.exit(f"{type(e).__name__}: {e}")
print("downloaded" + (" with the managed identity" if use_identity else ""))
PY
}
fetch() {
  # SRC DEST: a local file is copied, a URL downloaded
  local src=$1 dest=$2 out
  if [[ ! "$src" =~ ^https?:// ]]; then
    [[ -f "$src" ]] || die 11 "$src: no such file"
    cp -- "$src" "$dest"
    return 0
  fi
  say "downloading $(redact_str "$src")"
  if ! out=$(fetch_url "$src" "$dest" 2>&1); then
    printf 'could not download %s: %s\n' "$(redact_str "$src")" "$out" | redact >>"$LOG"
    die 11 "could not download $(redact_str "$src"): $(redact_str "$out")"
  fi
  printf '%s %s\n' "$(redact_str "$src")" "$out" >>"$LOG"
}
prepare_requirements() {
  # Checks the wheel against --package-sha256 and the lock, and writes the requirements pip
  # installs in hash-checking mode: the wheel (or se-forwarder==V) and the lock's dependencies.
  "$PYTHON" - "$@" <<'PY'
import hashlib, re, sys
from pathlib import Path
wheel, lock, version, extras, expected, out = sys.argv[1:7]

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

lines, ours = [], []
if lock:
    text = re.sub(r"\\\r?\n", " ", Path(lock).read_text("utf-8"))
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*==\s*([^\s;]+)", line)
        (ours if m and norm(m.group(1)) == "se-forwarder" else lines).append((m, line))
    if len(ours) > 1:
        sys.exit("the lock has more than one se-forwarder line")
lock_version = ours[0][0].group(3) if ours else ""
lock_hashes = set(re.findall(r"sha256:([0-9a-fA-F]{64})", ours[0][1].lower())) if ours else set()
if wheel:
    m = re.match(r"([^-]+)-([^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$", Path(wheel).name)
    if not m or norm(m.group(1)) != "se-forwarder":
        sys.exit(f"{Path(wheel).name} is not a se-forwarder wheel")
    sha = hashlib.sha256(Path(wheel).read_bytes()).hexdigest()
    if expected and sha != expected:
        sys.exit(f"the wheel's sha256 is {sha}, not the expected {expected} (--package-sha256)")
    if lock_version and lock_version != m.group(2):
        sys.exit(f"the lock is for se-forwarder {lock_version}, the wheel is {m.group(2)}")
    if lock_hashes and sha not in lock_hashes:
        sys.exit(f"the wheel's sha256 {sha} is not the one in the lock")
    first = f"se-forwarder{extras} @ {Path(wheel).resolve().as_uri()} --hash=sha256:{sha}"
else:
    if not ours or not lock_hashes:
        sys.exit("with --version, the lock must pin se-forwarder==V with its sha256")
    if lock_version != version:
        sys.exit(f"the lock is for se-forwarder {lock_version}, not {version}")
    first = re.sub(r"^[A-Za-z0-9._-]+\s*(\[[^\]]*\])?", f"se-forwarder{extras}", ours[0][1])
Path(out).write_text("\n".join([first] + [line for _, line in lines]) + "\n", "utf-8")
print(f"wheel sha256 {sha}" if wheel else f"se-forwarder {version} pinned by the lock")
PY
}

prepare_bundle() {
  # BUNDLE DEST EXTRAS EXPECTED_SHA REQUIREMENTS: checks the bundle's sha256, unpacks it (regular
  # files and directories only, nothing outside DEST), and writes the requirements of the target
  # this interpreter is (cp3XY, machine): its hash-pinned lock, se-forwarder with the extras asked
  "$PYTHON" - "$@" <<'PY'
import hashlib, json, platform, re, sys, tarfile
from pathlib import Path
bundle, dest, extras, expected, out = sys.argv[1:6]
sha = hashlib.sha256(Path(bundle).read_bytes()).hexdigest()
if expected and sha != expected:
    sys.exit(f"the bundle's sha256 is {sha}, not the expected {expected} (--package-sha256)")
root = Path(dest).resolve()
with tarfile.open(bundle, "r:gz") as tar:
    for m in tar.getmembers():
        target = (root / m.name).resolve()
        if not (m.isfile() or m.isdir()) or (target != root and root not in target.parents):
            sys.exit(f"the bundle holds an unsafe entry: {m.name}")
        if m.isdir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(m) as src, open(target, "wb") as dst:
                dst.write(src.read())
try:
    manifest = json.loads((root / "bundle.json").read_text("utf-8"))
except (OSError, ValueError) as exc:
    sys.exit(f"not a se-forwarder bundle (bundle.json: {exc})")
machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
target = f"cp{sys.version_info[0]}{sys.version_info[1]}-{machine}"
targets = manifest.get("targets", {})
if target not in targets:
    sys.exit(f"NO-TARGET the bundle has no wheels for Python {sys.version_info[0]}.{sys.version_info[1]} on "
             f"{machine} (it has: {', '.join(sorted(targets)) or 'none'}): build one for it "
             "(infra/scripts/build-bundle.py --python-version ... --arch ...) or pass --python "
             "with an interpreter it has")
wanted = {e for e in re.split(r"[\[\],\s]+", extras) if e}
missing = wanted - set(manifest.get("extras", []))
if missing:
    sys.exit(f"the bundle was built without the extra(s) {', '.join(sorted(missing))} "
             f"(it has: {', '.join(manifest.get('extras', [])) or 'none'})")
lines = (root / targets[target]).read_text("utf-8").splitlines()
ours = [i for i, line in enumerate(lines) if re.match(r"se[-_.]forwarder(\[[^\]]*\])?==", line)]
if len(ours) != 1 or "--hash=sha256:" not in lines[ours[0]]:
    sys.exit("the bundle's lock does not pin se-forwarder with its sha256")
# every wheel against the lock before anything is built (pip checks them again when installing)
present = {hashlib.sha256(w.read_bytes()).hexdigest() for w in (root / "wheels").glob("*.whl")}
unmatched = [line.split()[0] for line in lines
             if not set(re.findall(r"--hash=sha256:([0-9a-f]{64})", line)) & present]
if unmatched:
    sys.exit(f"the bundle's wheels do not match its lock for {target}: no file with the pinned "
             f"sha256 for {', '.join(unmatched)}")
lines[ours[0]] = re.sub(r"^se[-_.]forwarder(\[[^\]]*\])?", f"se-forwarder{extras}", lines[ours[0]])
Path(out).write_text("\n".join(lines) + "\n", "utf-8")
print(f"bundle se-forwarder {manifest.get('version')} for {target}, sha256 {sha}")
PY
}

# where the package comes from
REQUIREMENTS="" WHEEL="" FIND_LINKS="" PACKAGE_ID=""
if [[ $BUNDLE -eq 1 ]]; then
  fetch "$PACKAGE" "$DL/bundle.tar.gz"
  REQUIREMENTS="$DL/requirements.txt"
  if ! out=$(prepare_bundle "$DL/bundle.tar.gz" "$DL/bundle" "$EXTRAS_SPEC" "$PACKAGE_SHA256" "$REQUIREMENTS" 2>&1); then
    printf '%s\n' "$out" >>"$LOG"
    [[ "$out" == NO-TARGET* ]] && die 10 "${out#NO-TARGET }"
    die 11 "package check failed: $out"
  fi
  say "$out"
  PACKAGE_ID=${out##*sha256 }
  FIND_LINKS="$DL/bundle/wheels"
elif [[ -n "$PACKAGE" && ( "$PACKAGE" =~ ^https?:// || -f "$PACKAGE" ) ]]; then
  name=$(basename "${PACKAGE%%\?*}")
  [[ "$name" == *.whl ]] || die 2 "--package $(redact_str "$PACKAGE"): not a .whl file or a .tar.gz bundle"
  WHEEL="$DL/$name"
  fetch "$PACKAGE" "$WHEEL"
  PACKAGE_ID=$(sha256sum "$WHEEL" | cut -d' ' -f1)
elif [[ -n "$PACKAGE" ]]; then
  [[ -d "$PACKAGE" ]] || die 11 "--package $PACKAGE: no such file or directory"
  [[ -z "$LOCK" && -z "$PACKAGE_SHA256" ]] || die 2 "--lock and --package-sha256 need a wheel, not a project directory"
  PACKAGE=$(cd "$PACKAGE" && pwd)
else
  PACKAGE_ID="se-forwarder==$VERSION from $INDEX_URL"
fi
DEP_LOCK=""
if [[ $BUNDLE -eq 0 && ( -n "$LOCK" || -n "$PACKAGE_SHA256" ) ]]; then
  if [[ -n "$LOCK" ]]; then DEP_LOCK="$DL/dependencies.lock"; fetch "$LOCK" "$DEP_LOCK"; fi
  REQUIREMENTS="$DL/requirements.txt"
  if ! out=$(prepare_requirements "$WHEEL" "$DEP_LOCK" "$VERSION" "$EXTRAS_SPEC" "$PACKAGE_SHA256" "$REQUIREMENTS" 2>&1); then
    printf '%s\n' "$out" >>"$LOG"
    die 11 "package check failed: $out"
  fi
  say "$out"
fi
if [[ $BUNDLE -eq 1 ]]; then
  SPEC_ARGS=(--no-index --find-links "$FIND_LINKS" --require-hashes -r "$REQUIREMENTS")
  SPEC_SHOWN="se-forwarder${EXTRAS_SPEC} and its dependencies from the bundle (hash-checked, no package index)"
elif [[ -n "$REQUIREMENTS" && -n "$LOCK" ]]; then
  SPEC_ARGS=(--require-hashes -r "$REQUIREMENTS")
  SPEC_SHOWN="se-forwarder${EXTRAS_SPEC} and the dependencies pinned by $(redact_str "$LOCK") (hash-checked)"
else
  if [[ -n "$VERSION" ]]; then SPEC="se-forwarder${EXTRAS_SPEC}==${VERSION}"
  elif [[ -n "$WHEEL" ]]; then SPEC="${WHEEL}${EXTRAS_SPEC}"
  else SPEC="${PACKAGE}${EXTRAS_SPEC}"
  fi
  SPEC_ARGS=("$SPEC")
  SPEC_SHOWN="se-forwarder${EXTRAS_SPEC}"
  if [[ -n "$VERSION" ]]; then SPEC_SHOWN+="==$VERSION"; else SPEC_SHOWN+=" from $(redact_str "$PACKAGE")"; fi
  warn "the dependencies are not pinned (no --lock): pip takes their newest matching versions from its index"
fi

# The same package, lock, extras and Python as the running version: its virtualenv is reused (a
# configuration change re-deployed, a Run Command or cloud-init run again), unless --reinstall.
INSTALL_ID=""
if [[ -n "$PACKAGE_ID" ]]; then
  INSTALL_ID=$( { "$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version)'
                  printf '%s\n%s\n' "$PACKAGE_ID" "$EXTRAS_SPEC"
                  if [[ -n "$DEP_LOCK" ]]; then sha256sum <"$DEP_LOCK"; fi; } | sha256sum | cut -d' ' -f1)
fi
REUSE=0
RUNNING=$(readlink "$OPT/current" 2>/dev/null || true)
if [[ -n "$INSTALL_ID" && $REINSTALL -eq 0 && -n "$RUNNING" && -d "$OPT/$RUNNING" ]] &&
   [[ "$(cat "$OPT/$RUNNING/.se-forwarder-install-id" 2>/dev/null || true)" == "$INSTALL_ID" ]] &&
   "$OPT/$RUNNING/bin/se-forwarder" --help >>"$LOG" 2>&1; then
  REUSE=1
  STAMP=${RUNNING#versions/}
  NEW="$OPT/$RUNNING"
  say "reusing $RUNNING: the same package, lock and Python (--reinstall builds a new virtualenv)"
else
  say "creating virtualenv $NEW"
  if ! "$PYTHON" -m venv "$NEW" >>"$LOG" 2>&1; then
    cleanup_new; tail -n 20 "$LOG" >&2
    die 10 "could not create a virtualenv with $PYTHON (see $LOG)"
  fi
  PIP_ARGS=(install --disable-pip-version-check --no-input)
  PIP_ENV=()
  if [[ -n "$VERSION" || $BUNDLE -eq 1 ]]; then
    # se-forwarder by name from the index named here only (or from the bundle, with no index at
    # all): no configured index, extra index or find-links
    PIP_ENV=(-u PIP_EXTRA_INDEX_URL -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_NO_INDEX PIP_CONFIG_FILE=/dev/null)
  fi
  if [[ -n "$INDEX_URL" ]]; then PIP_ARGS+=(--index-url "$INDEX_URL"); fi
  say "installing $SPEC_SHOWN${INDEX_URL:+ from $(redact_str "$INDEX_URL")}"
  if ! env "${PIP_ENV[@]}" "$NEW/bin/python" -m pip "${PIP_ARGS[@]}" "${SPEC_ARGS[@]}" 2>&1 | redact >>"$LOG"; then
    tail -n 15 "$LOG" >&2
    cleanup_new
    if [[ $BUNDLE -eq 1 ]]; then
      die 11 "could not install $SPEC_SHOWN: a wheel the lock does not pin, or a hash that does not match (see $LOG)"
    fi
    die 11 "could not install $SPEC_SHOWN: no network to the package index, a wrong version or file, a dependency the lock does not pin (or a hash that does not match), or a proxy needed for the index (HTTPS_PROXY is honoured for the index). Full log: $LOG"
  fi
  # the service's dynamic user reads (and runs) all of it, whatever modes the files came with
  chmod -R u+rwX,go+rX,go-w "$NEW"
  if [[ -n "$INSTALL_ID" ]]; then printf '%s\n' "$INSTALL_ID" >"$NEW/.se-forwarder-install-id"; fi
fi
if ! "$NEW/bin/se-forwarder" --help >>"$LOG" 2>&1; then
  cleanup_new
  die 11 "the installed se-forwarder does not run (see $LOG)"
fi
INSTALLED_VERSION=$("$NEW/bin/python" -c 'import importlib.metadata as m; print(m.version("se-forwarder"))')
say "installed se-forwarder $INSTALLED_VERSION"

# 4. configuration (no secrets in it: the identity is the VM's managed identity, and a secret
# given here is a systemd credential, named by the config and read by the service from
# $CREDENTIALS_DIRECTORY)
toml_str() {
  # a TOML basic string (control characters were refused with the arguments)
  local v=$1
  v=${v//\\/\\\\}; v=${v//\"/\\\"}
  printf '"%s"' "$v"
}
write_config() {
  printf '# Written by install.sh on %s. Re-run install.sh to change it, or edit and restart.\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  printf '# No secrets belong here: the agent authenticates with the VM'"'"'s managed identity, and a\n'
  printf '# secret is a systemd credential (install.sh --credential), named here.\n\n'
  printf '[agent]\nstate_dir = %s\n' "$(toml_str "$STATE")"
  if [[ ${#TAG_NAMES[@]} -gt 0 ]]; then
    local t sep=""
    printf 'tags = ['
    for t in "${TAG_NAMES[@]}"; do printf '%s%s' "$sep" "$(toml_str "$t")"; sep=", "; done
    printf ']\n'
  fi
  printf '\n[imds]\nendpoint = %s\n' "$(toml_str "$IMDS_ENDPOINT")"
  if [[ -n "$LOGS_ENDPOINT" || -n "$EH_NAMESPACE" ]]; then
    printf '\n[identity]\nkind = "managed"\nclient_id = %s\n' "$(toml_str "$CLIENT_ID")"
  fi
  if [[ -n "$LOGS_ENDPOINT" ]]; then
    printf '\n[sinks.log_analytics]\nendpoint = %s\ndcr_immutable_id = %s\nrecords_stream = %s\nheartbeats_stream = %s\n' \
      "$(toml_str "$LOGS_ENDPOINT")" "$(toml_str "$DCR_ID")" "$(toml_str "$RECORDS_STREAM")" "$(toml_str "$HEARTBEATS_STREAM")"
  fi
  if [[ -n "$EH_NAMESPACE" ]]; then
    printf '\n[sinks.event_hubs]\nnamespace = %s\nhub = %s\n' "$(toml_str "$EH_NAMESPACE")" "$(toml_str "$EH_NAME")"
  elif [[ -n "$EH_CONN_FILE" ]]; then
    printf '\n[sinks.event_hubs]\nhub = %s\nconnection_string_credential = "eventhubs-connection-string"\n' "$(toml_str "$EH_NAME")"
  fi
  if [[ -n "$WEBHOOK_URL_FILE" ]]; then
    printf '\n[sinks.webhook]\nurl_credential = "webhook-url"\nformat = %s\n' "$(toml_str "$WEBHOOK_FORMAT")"
  fi
  if [[ -n "$FILE_SINK" ]]; then
    printf '\n[sinks.file]\npath = %s\n' "$(toml_str "$FILE_SINK")"
  fi
  if [[ $STDOUT_SINK -eq 1 ]]; then
    printf '\n[sinks.stdout]\n'
  fi
  if [[ -n "$POLICY_PRESET" || -n "$RULES_TOML" ]]; then
    printf '\n[policy]\n'
    if [[ -n "$POLICY_PRESET" ]]; then printf 'preset = %s\n' "$(toml_str "$POLICY_PRESET")"; fi
    if [[ -n "$RULES_TOML" ]]; then printf '%s\n' "$RULES_TOML"; fi
  fi
}
# Credentials: the store (root only) with the new ones beside the old, staged for check-config
CRED_STORE="$ETC/credentials"
STAGED_CREDS="$DL/credentials"
mkdir -m 0700 "$STAGED_CREDS"
if [[ -d "$CRED_STORE" ]]; then cp -a "$CRED_STORE"/. "$STAGED_CREDS"/; fi
for c in "${CREDENTIALS[@]}"; do
  install -m 0600 "${c#*=}" "$STAGED_CREDS/${c%%=*}"
done
CHECK_CREDS=()
if [[ -n "$(ls -A "$STAGED_CREDS")" ]]; then CHECK_CREDS=(--credentials-dir "$STAGED_CREDS"); fi

NEW_CONFIG=""
STAGED_CONFIG="$CONFIG.new"
if [[ $DRY_RUN -eq 1 ]]; then STAGED_CONFIG="$DL/$(basename "$CONFIG")"; fi
if [[ -n "$CONFIG_FILE" ]]; then
  NEW_CONFIG=$STAGED_CONFIG; rm -f "$NEW_CONFIG"; cp "$CONFIG_FILE" "$NEW_CONFIG"
elif [[ $CONFIG_GIVEN -eq 1 ]]; then
  NEW_CONFIG=$STAGED_CONFIG; rm -f "$NEW_CONFIG"; write_config >"$NEW_CONFIG"
  if [[ $DRY_RUN -eq 1 ]]; then chmod 0644 "$NEW_CONFIG"; fi
else
  say "keeping the existing configuration $CONFIG"
fi
CHECK_TARGET=${NEW_CONFIG:-$CONFIG}
# as the service will see it: secret files through its credentials, not through root's eyes
if ! out=$("$NEW/bin/se-forwarder" check-config --config "$CHECK_TARGET" "${CHECK_CREDS[@]}" 2>&1); then
  [[ -n "$NEW_CONFIG" ]] && rm -f "$NEW_CONFIG"
  cleanup_new
  printf '%s\n' "$out" >&2
  die 2 "configuration rejected by se-forwarder $INSTALLED_VERSION check-config"
fi
if [[ $ROLE == collector ]]; then
  # the one directory the collector's unit lets it write, and the section `collect` reads
  got=$("$NEW/bin/python" -c 'import sys, tomllib
doc = tomllib.load(open(sys.argv[1], "rb"))
print(("collector" if "collector" in doc else "none"), doc.get("agent", {}).get("state_dir", ""))' "$CHECK_TARGET")
  state_dir=${got#* }
  if [[ "${got%% *}" != collector || "${state_dir%/}" != "$STATE" ]]; then
    [[ -n "$NEW_CONFIG" ]] && rm -f "$NEW_CONFIG"
    cleanup_new
    die 2 "the collector's configuration needs a [collector] section and [agent] state_dir = \"$STATE\" (the one directory its unit lets it write; got: ${state_dir:-none})"
  fi
fi
if [[ $DRY_RUN -eq 1 ]]; then
  say "dry run: the configuration is valid for se-forwarder $INSTALLED_VERSION; nothing was changed"
  if [[ -n "$NEW_CONFIG" ]]; then
    if [[ -f "$CONFIG" ]] && cmp -s "$CONFIG" "$NEW_CONFIG"; then
      say "would keep $CONFIG (unchanged)"
    else
      say "would write $CONFIG:"
      sed 's/^/    /' "$NEW_CONFIG"
    fi
  fi
  if [[ ${#CREDENTIAL_NAMES[@]} -gt 0 ]]; then say "would store the credential(s) ${CREDENTIAL_NAMES[*]} (root only)"; fi
  if [[ $REUSE -eq 1 ]]; then say "would keep the running virtualenv $RUNNING (the same package, lock and Python)"
  else say "would install se-forwarder${EXTRAS_SPEC} $INSTALLED_VERSION into a new virtualenv and switch to it"
  fi
  say "would (re)start $SERVICE.service$([[ -f "$UNIT_DIR/$OTHER_SERVICE.service" ]] && printf ' and %s.service (same virtualenv), checking both' "$OTHER_SERVICE")"
  exit 0
fi
if [[ -n "$NEW_CONFIG" ]]; then
  chmod 0644 "$NEW_CONFIG"
  if [[ -f "$CONFIG" ]] && ! cmp -s "$CONFIG" "$NEW_CONFIG"; then cp -p "$CONFIG" "$CONFIG.previous"; fi
  mv -f "$NEW_CONFIG" "$CONFIG"
  say "wrote $CONFIG"
fi
chmod 0644 "$CONFIG"
if [[ ${#CREDENTIALS[@]} -gt 0 ]]; then
  mkdir -p -m 0700 "$CRED_STORE"
  chmod 0700 "$CRED_STORE"
  for name in "${CREDENTIAL_NAMES[@]}"; do
    if [[ -f "$CRED_STORE/$name" ]]; then cp -p "$CRED_STORE/$name" "$CRED_STORE/.$name.previous"; fi
    install -m 0600 "$STAGED_CREDS/$name" "$CRED_STORE/.$name.new"
    mv -f "$CRED_STORE/.$name.new" "$CRED_STORE/$name"
  done
  say "stored the credential(s) ${CREDENTIAL_NAMES[*]} in $CRED_STORE (root only); delete the file(s) you gave"
fi

# 5. switch: current -> the new virtualenv (atomic rename of a relative symlink)
PREVIOUS=""
if [[ -L "$OPT/current" ]]; then PREVIOUS=$(readlink "$OPT/current"); fi
switch_to() {
  ln -sfn "$1" "$OPT/current.tmp"
  mv -Tf "$OPT/current.tmp" "$OPT/current"
}
switch_to "versions/$STAMP"
printf '%s\n' "${OWN_EXTRAS:-none}" >"$OPT/extras.$SERVICE"
chmod 0644 "$OPT/extras.$SERVICE"
mkdir -p "$(dirname "$BIN_LINK")"
ln -sfn "$OPT/current/bin/se-forwarder" "$BIN_LINK"
# Under systemd the unit's StateDirectory= creates it (owned by the dynamic user, physically in
# /var/lib/private); create it here only for a relocated or systemd-less install.
if [[ -n "$PREFIX" || $NO_SYSTEMD -eq 1 ]] && [[ ! -e "$STATE" ]]; then
  mkdir -p "$STATE" && chmod 0750 "$STATE"
fi

# 6. the service
unit_text() {
  local print=print_unit
  if [[ $ROLE == collector ]]; then print=print_collector_unit; fi
  if [[ -z "$PREFIX" ]]; then "$print"; return; fi
  "$print" | sed -e "s#/opt/se-forwarder#${PREFIX}/opt/se-forwarder#g" \
                   -e "s#/etc/se-forwarder#${PREFIX}/etc/se-forwarder#g" \
                   -e "s#/var/lib/se-forwarder#${PREFIX}/var/lib/se-forwarder#g"
}
credentials_dropin() {
  # LoadCredential= for every credential in the store: systemd (as root) copies each into the
  # service's $CREDENTIALS_DIRECTORY, readable by the dynamic user alone
  local f
  printf '# Written by install.sh: the credentials in %s, handed to the service\n' "$CRED_STORE"
  printf '# (it reads $CREDENTIALS_DIRECTORY/<name>). Add one with install.sh --credential NAME=FILE.\n'
  printf '[Service]\n'
  for f in "$CRED_STORE"/*; do
    if [[ -f "$f" ]]; then printf 'LoadCredential=%s:%s\n' "$(basename "$f")" "$f"; fi
  done
}
mkdir -p "$UNIT_DIR"
unit_text >"$UNIT_FILE.tmp" && mv -f "$UNIT_FILE.tmp" "$UNIT_FILE"
chmod 0644 "$UNIT_FILE"
DROPIN="$UNIT_DIR/$SERVICE.service.d/credentials.conf"
if [[ -d "$CRED_STORE" ]] && compgen -G "$CRED_STORE/*" >/dev/null; then
  mkdir -p "$(dirname "$DROPIN")"
  chmod 0755 "$(dirname "$DROPIN")"
  credentials_dropin >"$DROPIN.tmp" && mv -f "$DROPIN.tmp" "$DROPIN"
  chmod 0644 "$DROPIN"
else
  rm -f "$DROPIN"
fi

rollback() {
  if [[ -n "$PREVIOUS" && -d "$OPT/$PREVIOUS" ]]; then
    warn "rolling back to $PREVIOUS"
    switch_to "$PREVIOUS"
    if [[ -f "$CONFIG.previous" ]]; then mv -f "$CONFIG.previous" "$CONFIG"; fi
    for name in "${CREDENTIAL_NAMES[@]}"; do
      if [[ -f "$CRED_STORE/.$name.previous" ]]; then mv -f "$CRED_STORE/.$name.previous" "$CRED_STORE/$name"; fi
    done
    sysctl_ daemon-reload || true
    sysctl_ restart "$SERVICE.service" || true
    # the other role was moved to the new version with this one: back with it
    if [[ $OTHER_ACTIVE -eq 1 ]]; then sysctl_ restart "$OTHER_SERVICE.service" || true; fi
    if [[ "$OPT/$PREVIOUS" != "$NEW" ]]; then rm -rf "$NEW"; fi
  fi
}

if ! have_systemd; then
  if [[ $NO_SYSTEMD -eq 1 ]]; then
    say "--no-systemd: unit written to $UNIT_FILE but not enabled or started; not verified"
  else
    warn "systemd is not running here (no /run/systemd/system): unit written to $UNIT_FILE, not started; not verified"
  fi
  exit 0
fi

# The other role on this VM runs from the same virtualenv: when it runs, it moves to the new
# version now, and its health is checked with this role's; either one failing rolls both back.
OTHER_ACTIVE=0
if [[ $REUSE -eq 0 && -f "$UNIT_DIR/$OTHER_SERVICE.service" ]] && sysctl_ is-active --quiet "$OTHER_SERVICE.service"; then
  OTHER_ACTIVE=1
fi
if [[ $ROLE == collector ]]; then OTHER_STATE="$PREFIX/var/lib/se-forwarder" OTHER_WHAT="the agent"
else OTHER_STATE="$PREFIX/var/lib/se-forwarder-collector" OTHER_WHAT="the collector"
fi
say "enabling and (re)starting $SERVICE.service"
if ! sysctl_ daemon-reload || ! sysctl_ enable "$SERVICE.service" || ! sysctl_ restart "$SERVICE.service"; then
  rollback
  die 14 "the service manager could not start $SERVICE.service: see 'systemctl status $SERVICE' and 'journalctl -u $SERVICE'"
fi
if [[ $OTHER_ACTIVE -eq 1 ]]; then
  say "restarting $OTHER_SERVICE.service on the new version too: both roles share the virtualenv"
  if ! sysctl_ restart "$OTHER_SERVICE.service"; then
    rollback
    die 14 "the service manager could not restart $OTHER_SERVICE.service on the new version: rolled both back"
  fi
fi

# 7. verification: the agent is polling IMDS
if [[ $ROLE == collector ]]; then
  say "waiting up to ${VERIFY_TIMEOUT}s for the collector to report healthy"
else
  say "waiting up to ${VERIFY_TIMEOUT}s for the agent to poll IMDS (the first call may take up to 2 minutes)"
fi
deadline=$(( SECONDS + VERIFY_TIMEOUT ))
status_out=""
while :; do
  if status_out=$("$OPT/current/bin/se-forwarder" status --state-dir "$STATE" 2>&1); then
    printf '%s\n' "$status_out"
    break
  fi
  if (( SECONDS >= deadline )); then
    printf '%s\n' "$status_out" >&2
    rollback
    die 13 "$WHAT did not become healthy within ${VERIFY_TIMEOUT}s: see 'se-forwarder status --state-dir $STATE' and 'journalctl -u $SERVICE -n 100'"
  fi
  sleep 2
done
if [[ $OTHER_ACTIVE -eq 1 ]]; then
  say "waiting up to ${VERIFY_TIMEOUT}s for $OTHER_WHAT to report healthy on the new version"
  while :; do
    if status_out=$("$OPT/current/bin/se-forwarder" status --state-dir "$OTHER_STATE" 2>&1); then
      break
    fi
    if (( SECONDS >= deadline )); then
      printf '%s\n' "$status_out" >&2
      rollback
      die 13 "$OTHER_WHAT ($OTHER_SERVICE.service) did not become healthy on the new version within ${VERIFY_TIMEOUT}s: rolled both roles back; see 'se-forwarder status --state-dir $OTHER_STATE'"
    fi
    sleep 2
  done
fi

# 8. optionally: something delivered by every sink
sink_report() {
  # prints "delivered <n-sinks-with-a-delivery>/<n-sinks>" and one "warning: ..." line per warning
  "$OPT/current/bin/se-forwarder" status --json --state-dir "$STATE" 2>/dev/null |
    "$OPT/current/bin/python" -c '
import json, sys
try:
    doc = json.load(sys.stdin)
except ValueError:
    print("delivered 0/0"); sys.exit(0)
sinks = (doc.get("status") or {}).get("sinks") or {}
done = sum(1 for s in sinks.values() if isinstance(s, dict) and s.get("last_delivery_at"))
print(f"delivered {done}/{len(sinks)}")
for w in doc.get("warnings") or []:
    print(f"warning: {w}")
' 2>/dev/null || true
}
print_sink_warnings() {
  local w
  while IFS= read -r w; do
    [[ "$w" == warning:* ]] && warn "${w#warning: }"
  done < <(sink_report | redact)
  return 0
}
if [[ $WAIT_DELIVERY -gt 0 ]]; then
  say "waiting up to ${WAIT_DELIVERY}s for every sink to deliver (role assignments can take minutes to apply)"
  deadline=$(( SECONDS + WAIT_DELIVERY ))
  while :; do
    got=$(sink_report | head -n 1)
    if [[ "$got" =~ ^delivered\ ([0-9]+)/([0-9]+)$ ]] && (( BASH_REMATCH[2] > 0 && BASH_REMATCH[1] == BASH_REMATCH[2] )); then
      say "every sink delivered (${got#delivered })"
      break
    fi
    if (( SECONDS >= deadline )); then
      print_sink_warnings
      INSTALL_DONE=1
      die 15 "installed and polling, but not every sink delivered within ${WAIT_DELIVERY}s (${got:-no status}): see the warnings above and 'se-forwarder status --state-dir $STATE'; $WHAT keeps the records in its spool and retries"
    fi
    sleep 3
  done
fi

# keep the running and the previous version only (a reused virtualenv: nothing changes)
if [[ $REUSE -eq 0 ]]; then
  for d in "$OPT"/versions/*; do
    [[ -d "$d" ]] || continue
    name="versions/$(basename "$d")"
    [[ "$name" == "versions/$STAMP" || "$name" == "$PREVIOUS" ]] || rm -rf "$d"
  done
fi
rm -f "$CONFIG.previous" "$CRED_STORE"/.*.previous
INSTALL_DONE=1
# 9. whatever happened, say what the sinks complain about (e.g. 403 until the role applies)
print_sink_warnings
if [[ $ROLE == collector ]]; then
  say "se-forwarder $INSTALLED_VERSION collector installed and running (state in $STATE)"
else
  say "se-forwarder $INSTALLED_VERSION installed and polling (state in $STATE)"
fi
exit 0
