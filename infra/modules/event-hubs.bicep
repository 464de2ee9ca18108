// Optional Event Hubs sink: a Standard namespace (local/SAS auth disabled, TLS 1.2, optional
// network rules), one hub, a consumer group for downstream readers, Azure Event Hubs Data Sender on
// the hub (only the hub: least privilege) for the agents' identities, and optionally Azure Event
// Hubs Data Receiver on the hub for the readers.

@description('Namespace name (globally unique, 8-50 characters: a letter first, then letters, digits and hyphens, a letter or digit last).')
@minLength(8)
@maxLength(50)
param namespaceName string

@description('Azure region.')
param location string

@description('Hub name; the hub is created as <hubName>-p<partitionCount> (the agent config\'s [sinks.event_hubs] hub is the hubName output).')
param hubName string = 'scheduled-events'

@description('Partitions of the hub (records are keyed by VmId, so one VM\'s records stay in order). A Standard hub cannot change its partition count after creation, so the count is part of the hub\'s name: another value creates a new hub instead of failing the deployment.')
@minValue(1)
@maxValue(32)
param partitionCount int = 4

@description('Message retention, in days.')
@minValue(1)
@maxValue(7)
param messageRetentionInDays int = 1

@description('Throughput units of the Standard namespace. Null: left out of the request, so a re-deployment keeps what was set by hand or by auto-inflate (a new namespace gets Azure\'s default, 1).')
@minValue(1)
@maxValue(40)
param capacity int?

@description('Auto-inflate (Azure raises the throughput units under load, up to maximumThroughputUnits; it never lowers them). Null: left out of the request, so a re-deployment keeps the namespace\'s setting.')
param autoInflate bool?

@description('With autoInflate=true: the most throughput units auto-inflate may reach.')
@minValue(0)
@maxValue(40)
param maximumThroughputUnits int = 0

@description('Consumer group created for downstream readers.')
param consumerGroupName string = 'se-forwarder-readers'

@description('Public network access of the namespace.')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('IPv4 addresses or CIDR ranges allowed over the public endpoint; with this or allowedSubnetIds set, everything else is denied.')
param allowedIpRanges array = []

@description('Subnet resource ids (Microsoft.EventHub service endpoint) allowed; see allowedIpRanges.')
param allowedSubnetIds array = []

@description('Principal (object) ids of downstream readers that get Azure Event Hubs Data Receiver on the hub.')
@maxLength(50)
param receiverPrincipalIds array = []

@description('Principal type of receiverPrincipalIds.')
param receiverPrincipalType string = 'ServicePrincipal'

@description('Principal (object) ids that get Azure Event Hubs Data Sender on the hub: main.bicep\'s agentPrincipalIds (at most 200) and the fleet identity.')
@maxLength(201)
param senderPrincipalIds array = []

@description('Object ids of Microsoft Entra groups that get Azure Event Hubs Data Sender on the hub (one assignment per group, for fleets).')
@maxLength(20)
param senderGroupIds array = []

@description('Principal type of senderPrincipalIds (managed identities are ServicePrincipal).')
param senderPrincipalType string = 'ServicePrincipal'

param tags object = {}

// Azure Event Hubs Data Sender (the agents) and Data Receiver (downstream readers).
var dataSender = '2b629674-e913-4c01-ae53-ef4638d8f975'
var dataReceiver = 'a638d3c7-ab3a-418d-83e6-5f17a39d4fde'
var restricted = !empty(allowedIpRanges) || !empty(allowedSubnetIds)

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' = {
  name: namespaceName
  location: location
  tags: tags
  // A null value is left out of the request: a re-deployment keeps the namespace's own.
  sku: {
    name: 'Standard'
    tier: 'Standard'
    capacity: capacity
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: publicNetworkAccess
    kafkaEnabled: true
    isAutoInflateEnabled: autoInflate
    maximumThroughputUnits: autoInflate == true ? (maximumThroughputUnits >= (capacity ?? 1) ? maximumThroughputUnits : fail('eventHubsMaximumThroughputUnits must be at least the throughput units (${capacity ?? 1}) when auto-inflate is on.')) : null
  }
}

// With no rule: public access as publicNetworkAccess says. With rules (or public access off): only
// those sources, and Azure's trusted services. Event Grid delivering with a managed identity (the
// collector's system topics, infra/collector.bicep) reaches a firewalled hub only through "Allow
// trusted Microsoft services"; without it every notification is dead-lettered after 24 hours.
resource networkRules 'Microsoft.EventHub/namespaces/networkRuleSets@2024-01-01' = {
  parent: namespace
  name: 'default'
  properties: {
    publicNetworkAccess: publicNetworkAccess
    defaultAction: restricted ? 'Deny' : 'Allow'
    trustedServiceAccessEnabled: restricted || publicNetworkAccess == 'Disabled'
    ipRules: [for range in allowedIpRanges: {
      ipMask: range
      action: 'Allow'
    }]
    virtualNetworkRules: [for subnetId in allowedSubnetIds: {
      subnet: {
        id: subnetId
      }
      ignoreMissingVnetServiceEndpoint: false
    }]
  }
}

resource hub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' = {
  parent: namespace
  name: '${hubName}-p${partitionCount}'
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

resource receivers 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for principalId in receiverPrincipalIds: {
  name: guid(hub.id, principalId, dataReceiver)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataReceiver)
    principalId: principalId
    principalType: receiverPrincipalType
    description: 'reads se-forwarder lifecycle records from this hub'
  }
}]

output namespaceName string = namespace.name
@description('Fully qualified namespace (the agent config\'s [sinks.event_hubs] namespace).')
output fullyQualifiedNamespace string = split(split(namespace.properties.serviceBusEndpoint, '/')[2], ':')[0]
output hubName string = hub.name
output hubId string = hub.id
output consumerGroupName string = consumerGroup.name
