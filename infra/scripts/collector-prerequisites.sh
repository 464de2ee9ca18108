#!/usr/bin/env bash
# Once per subscription, before infra/collector.bicep (docs/collector.md, "Deployment recipe"):
# Microsoft's preview prerequisites of Scheduled Events in Resource Graph and Event Grid, done
# instead of named (../shared/spec/platform-channels.md, "Opting in"):
#   1. the preview features Microsoft.Compute/SendScheduledEventsPolicy (both channels) and
#      Microsoft.Maintenance/ScheduledEventsActivity (Event Grid), waited for until Registered,
#      then the resource providers re-registered so the features take effect;
#   2. the providers the stage uses: Microsoft.EventGrid, Microsoft.ResourceNotifications,
#      Microsoft.Maintenance, Microsoft.EventHub, Microsoft.Storage;
#   3. the ids infra/collector.bicep needs and no template can look up: Scheduled Event
#      Contributor's definition id in this tenant, and the object id of the Maintenance resource
#      provider's service principal (application id 78315a30-673a-4a46-8e5c-ce59dbc6adf8), which
#      the stage gives Scheduled Event Contributor (step 4 of Microsoft's Resource Graph page).
# It prints them as deployment parameters. Needs the Azure CLI, logged in, with Contributor on the
# subscription (feature registration) and Directory read (the service principal).
#
#   infra/scripts/collector-prerequisites.sh [--subscription ID] [--timeout SECONDS] [--dry-run]
set -euo pipefail

MAINTENANCE_APP_ID=78315a30-673a-4a46-8e5c-ce59dbc6adf8
FEATURES=("Microsoft.Compute/SendScheduledEventsPolicy" "Microsoft.Maintenance/ScheduledEventsActivity")
PROVIDERS=(Microsoft.Compute Microsoft.Maintenance Microsoft.EventGrid Microsoft.ResourceNotifications Microsoft.EventHub Microsoft.Storage)
SUB=()
TIMEOUT=1800
DRY=0

while [ $# -gt 0 ]; do
  case "$1" in
    --subscription) SUB=(--subscription "$2"); shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "collector-prerequisites: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$TIMEOUT" in ''|*[!0-9]*) echo "collector-prerequisites: --timeout takes seconds" >&2; exit 2 ;; esac

run() {
  if [ "$DRY" = 1 ]; then printf 'would run: az'; printf ' %q' "$@"; printf '\n'; else az "$@"; fi
}

for f in "${FEATURES[@]}"; do
  run feature register --namespace "${f%%/*}" --name "${f#*/}" "${SUB[@]}" --output none
done

if [ "$DRY" = 0 ]; then
  deadline=$(( $(date +%s) + TIMEOUT ))
  for f in "${FEATURES[@]}"; do
    while :; do
      state=$(az feature show --namespace "${f%%/*}" --name "${f#*/}" "${SUB[@]}" --query properties.state -o tsv)
      [ "$state" = Registered ] && break
      if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "collector-prerequisites: $f is still $state after ${TIMEOUT}s; run again later (a preview feature may need Microsoft's approval)" >&2
        exit 1
      fi
      echo "collector-prerequisites: $f is $state, waiting" >&2
      sleep 30
    done
  done
fi

for p in "${PROVIDERS[@]}"; do
  run provider register --namespace "$p" "${SUB[@]}" --wait --output none
done

if [ "$DRY" = 1 ]; then
  run role definition list --name "Scheduled Event Contributor" --query '[0].name' -o tsv
  run ad sp show --id "$MAINTENANCE_APP_ID" --query id -o tsv
  exit 0
fi

role=$(az role definition list --name "Scheduled Event Contributor" "${SUB[@]}" --query '[0].name' -o tsv)
if [ -z "$role" ]; then
  echo "collector-prerequisites: no role \"Scheduled Event Contributor\" in this tenant yet (it comes with the preview); deploy the Event Grid channel without it (resourceGraphReader=false) and run this again later" >&2
  exit 1
fi
sp=$(az ad sp show --id "$MAINTENANCE_APP_ID" --query id -o tsv 2>/dev/null || true)
if [ -z "$sp" ]; then
  echo "collector-prerequisites: the Maintenance resource provider has no service principal in this tenant yet: 'az provider register --namespace Microsoft.Maintenance' creates it; run this again" >&2
  exit 1
fi
echo "scheduledEventContributorRoleId=$role maintenanceProviderPrincipalId=$sp"
