// Monitoring Metrics Publisher on stage 2's Data Collection Rule for the collector's identity, in
// the rule's resource group. The principal is a parameter here (known when this nested
// deployment starts), so the assignment is named from scope, principal and role: a recreated
// identity gets a new assignment instead of "principalId can't be modified".

@description('The Data Collection Rule (existing) in this resource group.')
param dataCollectionRuleName string

@description('Object id of the collector\'s identity.')
param collectorPrincipalId string

@allowed(['ServicePrincipal', 'User', 'Group'])
param collectorPrincipalType string = 'ServicePrincipal'

var metricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb' // Monitoring Metrics Publisher

resource dcr 'Microsoft.Insights/dataCollectionRules@2023-03-11' existing = {
  name: dataCollectionRuleName
}

resource publisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(dcr.id, collectorPrincipalId, metricsPublisher)
  scope: dcr
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', metricsPublisher)
    principalId: collectorPrincipalId
    principalType: collectorPrincipalType
    description: 'se-forwarder collect writes ScheduledEventsPlatform_CL through this rule'
  }
}
