// Optional Event Hubs sink: a Standard namespace (local/SAS auth disabled, TLS 1.2), one hub, a
// consumer group for downstream readers, and Azure Event Hubs Data Sender on the hub (only the hub:
// least privilege) for the agents' identities.

@description('Namespace name (globally unique, 6-50 characters).')
@minLength(6)
@maxLength(50)
param namespaceName string

@description('Azure region.')
param location string

@description('Hub name (the agent config\'s [sinks.event_hubs] hub).')
param hubName string = 'scheduled-events'

@description('Partitions of the hub (records are keyed by VmId, so one VM\'s records stay in order).')
@minValue(1)
@maxValue(32)
param partitionCount int = 4

@description('Message retention, in days.')
@minValue(1)
@maxValue(7)
param messageRetentionInDays int = 1

@description('Throughput units of the Standard namespace.')
@minValue(1)
@maxValue(40)
param capacity int = 1

@description('Consumer group created for downstream readers.')
param consumerGroupName string = 'se-forwarder-readers'

@description('Principal (object) ids that get Azure Event Hubs Data Sender on the hub.')
@maxLength(200)
param senderPrincipalIds array = []

@description('Object ids of Microsoft Entra groups that get Azure Event Hubs Data Sender on the hub (one assignment per group, for fleets).')
@maxLength(20)
param senderGroupIds array = []

@description('Principal type of senderPrincipalIds (managed identities are ServicePrincipal).')
param senderPrincipalType string = 'ServicePrincipal'

param tags object = {}

// Azure Event Hubs Data Sender.
var dataSender = '2b629674-e913-4c01-ae53-ef4638d8f975'

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' = {
  name: namespaceName
  location: location
  tags: tags
  sku: {
    name: 'Standard'
    tier: 'Standard'
    capacity: capacity
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: 'Enabled'
    isAutoInflateEnabled: false
    kafkaEnabled: true
  }
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
    userMetadata: 'Readers of se-forwarder lifecycle records'
  }
}

resource senders 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for principalId in senderPrincipalIds: {
  name: guid(hub.id, principalId, dataSender)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataSender)
    principalId: principalId
    principalType: senderPrincipalType
    description: 'se-forwarder agents send records to this hub'
  }
}]

resource senderGroups 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for groupId in senderGroupIds: {
  name: guid(hub.id, groupId, dataSender)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataSender)
    principalId: groupId
    principalType: 'Group'
    description: 'se-forwarder agents (members of this group) send records to this hub'
  }
}]

output namespaceName string = namespace.name
@description('Fully qualified namespace (the agent config\'s [sinks.event_hubs] namespace).')
output fullyQualifiedNamespace string = split(split(namespace.properties.serviceBusEndpoint, '/')[2], ':')[0]
output hubName string = hub.name
output hubId string = hub.id
output consumerGroupName string = consumerGroup.name
