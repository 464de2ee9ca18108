// Azure Event Hubs Data Sender on the collector's hub for the Event Grid system topics' identities,
// and for nothing else (modules/collector.bicep). Deployed into the namespace's resource group;
// the principals are parameters here (known when this nested deployment starts), so each
// assignment is named from scope, role and principal: a recreated topic (a new identity) gets a
// new assignment instead of "principalId can't be modified".

@description('Event Hubs namespace (existing).')
param namespaceName string

@description('The collector\'s hub (existing).')
param hubName string

@description('Principal ids of the system topics\' identities.')
@maxLength(2)
param topicPrincipalIds array

var dataSender = '2b629674-e913-4c01-ae53-ef4638d8f975' // Azure Event Hubs Data Sender

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource hub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' existing = {
  parent: namespace
  name: hubName
}

resource senders 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for principalId in topicPrincipalIds: {
  name: guid(hub.id, principalId, dataSender)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataSender)
    principalId: principalId
    principalType: 'ServicePrincipal'
    description: 'an Event Grid system topic delivers Azure\'s notifications to the collector\'s hub'
  }
}]
