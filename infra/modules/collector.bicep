// The collector's place on an Event Hub (docs/collector.md): its own consumer group on the hub the
// Resource Notifications system topics deliver to, and its identity's read right there (Azure
// Event Hubs Data Receiver on the hub only). The system topics, their event subscriptions and the
// checkpoint storage are deployed with the CLI for now (docs/collector.md, "Deployment recipe").

@description('Event Hubs namespace holding the hub (existing).')
param namespaceName string

@description('The hub the system topics\' event subscriptions deliver to (existing).')
param hubName string

@description('The collector\'s consumer group (never $Default).')
param consumerGroupName string = 'se-forwarder-collector'

@description('Object id of the collector\'s identity.')
param collectorPrincipalId string

@description('ServicePrincipal for a managed identity.')
@allowed(['ServicePrincipal', 'User', 'Group'])
param collectorPrincipalType string = 'ServicePrincipal'

var dataReceiver = 'a638d3c7-ab3a-418d-83e6-5f17a39d4fde' // Azure Event Hubs Data Receiver

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource hub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' existing = {
  parent: namespace
  name: hubName
}

resource consumerGroup 'Microsoft.EventHub/namespaces/eventhubs/consumergroups@2024-01-01' = {
  parent: hub
  name: consumerGroupName
  properties: {
    userMetadata: 'se-forwarder collect: Azure\'s own record of every VM\'s maintenance'
  }
}

resource receiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(hub.id, collectorPrincipalId, dataReceiver)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataReceiver)
    principalId: collectorPrincipalId
    principalType: collectorPrincipalType
    description: 'se-forwarder collect reads the platform notifications from this hub'
  }
}

output consumerGroupName string = consumerGroup.name
