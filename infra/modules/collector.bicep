// The collector's own hub (docs/collector.md): deployed into the Event Hubs namespace's resource
// group, whichever group or subscription that is. Only the Event Grid system topics write to it
// (Azure Event Hubs Data Sender, modules/collector-senders.bicep) and only the collector reads it
// (its consumer group, Azure Event Hubs Data Receiver on this hub only): no agent identity holds a
// right here, so nothing but Azure's own notifications can reach what the collector records as
// "what Azure says happened". The system topics, their event subscriptions and the checkpoint
// storage are the other modules of infra/collector.bicep.

@description('Event Hubs namespace (existing, Standard or higher), in this module\'s resource group.')
param namespaceName string

@description('The collector\'s hub (created here; never the agents\' hub of stage 2).')
@minLength(1)
@maxLength(256)
param hubName string = 'platform-events'

@description('Partitions of the hub (a few notifications a minute at most: 2 is plenty; fixed at creation).')
@minValue(1)
@maxValue(32)
param partitionCount int = 2

@description('How long the hub keeps what Event Grid delivered, in days: the longest the collector may be down without losing a status change. Standard allows 1 to 7.')
@minValue(1)
@maxValue(7)
param messageRetentionInDays int = 7

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

resource hub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' = {
  parent: namespace
  name: hubName
  properties: {
    partitionCount: partitionCount
    messageRetentionInDays: messageRetentionInDays
  }
}

resource consumerGroup 'Microsoft.EventHub/namespaces/eventhubs/consumergroups@2024-01-01' = {
  parent: hub
  name: consumerGroupName
  properties: {
    userMetadata: 'se-forwarder collect: Azure\'s own record of every VM\'s maintenance'
  }
}

// Named from scope, principal and role: a recreated identity (a new principal id) gets a new
// assignment instead of "principalId can't be modified", and the same principal keeps its name.
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

output hubId string = hub.id
output hubName string = hub.name
output consumerGroupName string = consumerGroup.name
@description('Fully qualified namespace from the namespace itself (the public cloud\'s suffix or a sovereign cloud\'s: never hard-coded).')
output fullyQualifiedNamespace string = split(split(namespace.properties.serviceBusEndpoint, '/')[2], ':')[0]
