// The collector's read right for Resource Graph (`collect --resource-graph`, or the periodic pass
// beside the hub): Reader on the subscription, the scope Resource Graph answers for. Optionally
// the Scheduled Event Contributor role, which Microsoft's pages name for reading or acknowledging
// these events: its definition id is not in this template (look it up with
// `az role definition list --name "Scheduled Event Contributor" --query [0].name -o tsv`).
targetScope = 'subscription'

@description('Object id of the collector\'s identity.')
param collectorPrincipalId string

@allowed(['ServicePrincipal', 'User', 'Group'])
param collectorPrincipalType string = 'ServicePrincipal'

@description('Definition id (a GUID) of Scheduled Event Contributor; empty: not assigned.')
param scheduledEventContributorRoleId string = ''

var reader = 'acdd72a7-3385-48ef-bd42-f606fba81ae7' // Reader

resource readerAssignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(subscription().id, collectorPrincipalId, reader)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', reader)
    principalId: collectorPrincipalId
    principalType: collectorPrincipalType
    description: 'se-forwarder collect reads maintenanceresources and healthresources in Resource Graph'
  }
}

resource scheduledEvents 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(scheduledEventContributorRoleId)) {
  name: guid(subscription().id, collectorPrincipalId, scheduledEventContributorRoleId)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', scheduledEventContributorRoleId)
    principalId: collectorPrincipalId
    principalType: collectorPrincipalType
    description: 'se-forwarder collect reads the platform\'s Scheduled Events'
  }
}
