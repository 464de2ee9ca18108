// se-forwarder, stage 1 of 2: the Log Analytics workspace (new, or an existing one) and the
// custom tables of contract.json: ScheduledEvents_CL, ScheduledEventsAgent_CL and
// ScheduledEventsPlatform_CL (the collector's).
//
//   az deployment group create -g <rg> -n se-forwarder-tables -f infra/tables.bicep \
//     -p infra/tables.parameters.example.json
//   az deployment group create -g <rg> -n se-forwarder -f infra/main.bicep \
//     -p infra/main.parameters.example.json -p workspaceResourceId=<output workspaceResourceId>
//
// A deployment of its own, run before main.bicep: a Data Collection Rule created right after a
// brand-new custom table may not see it yet and fails with InvalidOutputTable, and dependsOn does
// not help. Run it again whenever contract.json gains columns (append-only: see infra/README.md).

targetScope = 'resourceGroup'

import { checkedTotalRetention, checkedWorkspaceId } from 'modules/shared.bicep'

@description('Prefix of the workspace name (lowercase letters, digits and hyphens).')
@minLength(3)
@maxLength(20)
param namePrefix string = 'se-forwarder'

@description('Azure region of a new workspace. The Data Collection Rule, alerts and workbooks (main.bicep) follow the workspace\'s region.')
param location string = resourceGroup().location

@description('Resource id of an existing Log Analytics workspace to use; empty = create one. The tables go into its resource group (write access needed there).')
param existingWorkspaceResourceId string = ''

@description('Name of the workspace to create (when existingWorkspaceResourceId is empty).')
param workspaceName string = '${namePrefix}-law'

@description('Interactive (Analytics plan) retention of every table of contract.json, in days.')
@minValue(4)
@maxValue(730)
param tableRetentionInDays int = 90

@description('Total retention of every table of contract.json including long-term archive, in days: 4 to 730, or whole years (1095, 1460, 1826, 2191, 2556, 2922, 3288, 3653, 4018, 4383).')
@minValue(4)
@maxValue(4383)
param tableTotalRetentionInDays int = 365

@description('Tags applied to a new workspace.')
param tags object = {
  application: 'se-forwarder'
}

var useExistingWorkspace = !empty(existingWorkspaceResourceId)
var workspaceResourceId = useExistingWorkspace ? checkedWorkspaceId(existingWorkspaceResourceId) : resourceId('Microsoft.OperationalInsights/workspaces', workspaceName)
// /subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.OperationalInsights/workspaces/<name>
var workspaceIdParts = split(workspaceResourceId, '/')

module workspace 'modules/workspace.bicep' = if (!useExistingWorkspace) {
  name: '${namePrefix}-workspace'
  params: {
    name: workspaceName
    location: location
    tags: tags
  }
}

// Deployed into the workspace's resource group, maybe shared with other teams' deployments: the
// nested deployment's name is unique to this resource group and deployment name, so neighbours
// (and this template deployed from another resource group) never replace each other's.
module tables 'modules/tables.bicep' = {
  name: '${namePrefix}-tables-${uniqueString(resourceGroup().id, deployment().name)}'
  scope: resourceGroup(workspaceIdParts[2], workspaceIdParts[4])
  params: {
    workspaceName: last(workspaceIdParts)
    retentionInDays: tableRetentionInDays
    totalRetentionInDays: checkedTotalRetention(tableTotalRetentionInDays)
  }
  dependsOn: [
    workspace
  ]
}

@description('Resource id of the workspace: main.bicep\'s workspaceResourceId.')
output workspaceResourceId string = workspaceResourceId

@description('Table names by contract key (records, heartbeats).')
output tableNames object = tables.outputs.tableNames
