#!/usr/bin/env bash
# Teardown and re-deploy made safe where a deleted resource group is not the whole story
# (docs/install.md, "Teardown and re-deploying"). Three steps, each its own subcommand:
#
#   collector  the collector's identity: its role assignments by principal first (the Reader and
#              Scheduled Event Contributor on the subscription sit outside any resource group and
#              would outlive it as "Identity not found"), then the identity itself.
#                teardown.sh collector --resource-group RG --identity NAME
#   prune      role assignments of principals no longer in main.bicep's agentPrincipalIds
#              (deployments are incremental: a removed principal keeps its rights). On each scope
#              (the rule; the hub with Event Hubs), every Monitoring Metrics Publisher or Azure
#              Event Hubs Data Sender assignment whose principal is not kept is deleted. Keep
#              every id still in agentPrincipalIds and agentGroupObjectIds, the fleet identity and
#              the collector's principal (it publishes to the rule too).
#                teardown.sh prune --scope RULE_ID [--scope HUB_ID] --keep ID[,ID...]
#   workspace  the Log Analytics workspace. A deleted workspace is soft-deleted for 14 days: its
#              name stays taken (stage 1 in another group fails, in the same group it recovers
#              the old data). Without --force this says so and soft-deletes; --force deletes it
#              for good (the data cannot be recovered).
#                teardown.sh workspace --resource-group RG --name NAME [--force]
#
# Common options: --subscription ID, --dry-run (print the changing az calls, make none; the
# reading calls still run). Needs the Azure CLI, logged in, with User Access Administrator (or
# Owner) on the scopes for the role assignments.
set -euo pipefail

MONITORING_METRICS_PUBLISHER=3913510d-42f4-4e42-8a64-420c390055eb
EVENT_HUBS_DATA_SENDER=2b629674-e913-4c01-ae53-ef4638d8f975

say() { echo "teardown: $*" >&2; }
usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; }

[ $# -gt 0 ] || { usage >&2; exit 2; }
CMD="$1"; shift
case "$CMD" in
  collector|prune|workspace) ;;
  -h|--help) usage; exit 0 ;;
  *) say "unknown subcommand $CMD (collector, prune, workspace)"; exit 2 ;;
esac

SUB=()
RG=""
NAME=""
IDENTITY=""
SCOPES=()
KEEP=""
KEEP_GIVEN=0
FORCE=0
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --subscription) SUB=(--subscription "$2"); shift 2 ;;
    --resource-group|-g) RG="$2"; shift 2 ;;
    --name|-n) NAME="$2"; shift 2 ;;
    --identity) IDENTITY="$2"; shift 2 ;;
    --scope) SCOPES+=("$2"); shift 2 ;;
    --keep) KEEP="$2"; KEEP_GIVEN=1; shift 2 ;;
    --force) FORCE=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) say "unknown option $1"; exit 2 ;;
  esac
done

# a changing call: printed under --dry-run, else run
change() {
  if [ "$DRY" = 1 ]; then printf 'would run: az'; printf ' %q' "$@"; printf '\n'; else az "$@"; fi
}

need() { [ -n "$2" ] || { say "$CMD needs $1"; exit 2; }; }

case "$CMD" in
  collector)
    need --resource-group "$RG"; need --identity "$IDENTITY"
    principal=$(az identity show -g "$RG" -n "$IDENTITY" "${SUB[@]}" --query principalId -o tsv)
    need "an identity $IDENTITY in $RG (az identity show gave no principal id)" "$principal"
    # --all: every scope, the subscription's Reader and Scheduled Event Contributor included
    ids=$(az role assignment list --assignee-object-id "$principal" --all "${SUB[@]}" --query '[].id' -o tsv)
    n=0
    for id in $ids; do
      change role assignment delete --ids "$id" "${SUB[@]}" --output none
      n=$((n + 1))
    done
    say "$n role assignment(s) of $principal removed"
    # only now: with the identity gone first, its assignments could only be found as orphans
    change identity delete -g "$RG" -n "$IDENTITY" "${SUB[@]}"
    ;;
  prune)
    [ "${#SCOPES[@]}" -gt 0 ] || { say "prune needs --scope (the rule's id, and the hub's with Event Hubs)"; exit 2; }
    # --keep is required even when nothing is kept (--keep ''): deleting every publisher is a choice
    [ "$KEEP_GIVEN" = 1 ] || { say "prune needs --keep: the principal and group ids still in agentPrincipalIds, agentGroupObjectIds, the fleet identity and the collector"; exit 2; }
    keep=",$(printf '%s' "$KEEP" | tr 'A-Z' 'a-z' | tr -d ' '),"
    n=0
    for scope in "${SCOPES[@]}"; do
      for role in "$MONITORING_METRICS_PUBLISHER" "$EVENT_HUBS_DATA_SENDER"; do
        rows=$(az role assignment list --scope "$scope" --role "$role" "${SUB[@]}" --query '[].[id, principalId]' -o tsv)
        while read -r id principal; do
          [ -n "$id" ] || continue
          case "$keep" in *",$(printf '%s' "$principal" | tr 'A-Z' 'a-z'),"*) continue ;; esac
          say "principal $principal is not kept: removing $id"
          change role assignment delete --ids "$id" "${SUB[@]}" --output none
          n=$((n + 1))
        done <<< "$rows"
      done
    done
    say "$n role assignment(s) removed"
    ;;
  workspace)
    need --resource-group "$RG"; need --name "$NAME"
    if [ "$FORCE" = 1 ]; then
      say "deleting workspace $NAME for good (--force): its data cannot be recovered"
      change monitor log-analytics workspace delete -g "$RG" -n "$NAME" --force --yes "${SUB[@]}"
    else
      say "warning: workspace $NAME is soft-deleted for 14 days: its name stays taken (stage 1 in another resource group fails; in $RG it recovers the old workspace and its data). Run again with --force to delete it for good, or deploy stage 1 with another workspaceName."
      change monitor log-analytics workspace delete -g "$RG" -n "$NAME" --yes "${SUB[@]}"
    fi
    ;;
esac
