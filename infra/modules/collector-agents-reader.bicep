// Approvals from outside the VM (approveFromOutside=true, `[collector.preview_acknowledge]`, a
// preview API): the collector must know which VMs run an agent, since an agent owns its VM's
// approval and the collector never approves one. It reads the agents' heartbeats
// (ScheduledEventsAgent_CL) in this workspace: **Log Analytics Reader** on the workspace only, in
// the workspace's resource group. The acknowledge itself needs Scheduled Event Contributor over
// the VMs, which the Resource Graph channel already holds on the subscription
// (modules/collector-reader.bicep: Microsoft names one role for reading and acknowledging the
// events); approvals need that channel (its inventory), so no second assignment is made here.

@description('The Log Analytics workspace (existing) of the agents\' heartbeats, in this resource group.')
param workspaceName string

@description('Object id of the collector\'s identity.')
param collectorPrincipalId string

@allowed(['ServicePrincipal', 'User', 'Group'])
param collectorPrincipalType string = 'ServicePrincipal'

var logAnalyticsReader = '73c42c96-874c-492b-b04d-ab87d138a893' // Log Analytics Reader

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' existing = {
  name: workspaceName
}

resource heartbeatsReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(workspace.id, collectorPrincipalId, logAnalyticsReader)
  scope: workspace
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', logAnalyticsReader)
    principalId: collectorPrincipalId
    principalType: collectorPrincipalType
    description: 'se-forwarder collect reads the agents\' heartbeats: it never approves a VM that runs an agent'
  }
}
