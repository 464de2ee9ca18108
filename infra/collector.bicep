// The collector's stage (docs/collector.md, "Deployment recipe"): after infra/main.bicep, in the
// same resource group. Azure's own Scheduled Events and Resource Health annotations reach the
// collector's hub through Event Grid system topics; the collector reads them with its own
// consumer group, keeps checkpoints in a storage account of its own, reads Resource Graph, and
// writes to the Data Collection Rule of stage 2:
//
//   az deployment group create -g RG -n se-forwarder-collector -f infra/collector.bicep \
//     -p eventHubsNamespaceName=<namespace> eventHubName=<stage 2 eventHubName> \
//        dataCollectionRuleName=se-forwarder-dcr
//
// The collector's identity (a user-assigned identity of its own, or collectorPrincipalId) gets
// only: Azure Event Hubs Data Receiver on the hub, Storage Blob Data Contributor on the
// checkpoint container, Monitoring Metrics Publisher on the rule, and Reader on the
// subscription (Resource Graph). The subscription-scope assignment needs Owner or User Access
// Administrator there.
targetScope = 'resourceGroup'

@description('Prefix of the names.')
param namePrefix string = 'se-forwarder'

@description('Azure region of the identity and the storage account.')
param location string = resourceGroup().location

@description('Event Hubs namespace (name, not host name) holding the hub; stage 2 with deployEventHubs=true, or your own with local auth disabled.')
param eventHubsNamespaceName string

@description('The hub the system topics deliver to and the collector reads (stage 2 output eventHubName).')
param eventHubName string

@description('The collector\'s consumer group on that hub.')
param consumerGroupName string = 'se-forwarder-collector'

@description('Storage account of the checkpoints (new).')
@minLength(3)
@maxLength(24)
param storageAccountName string = 'sefwd${uniqueString(resourceGroup().id)}'

@description('Container of the checkpoints.')
param checkpointContainerName string = 'se-forwarder-collector'

@description('The MaintenanceResources system topic (false where the subscription has one: add an event subscription to it instead).')
param deployMaintenanceTopic bool = true

@description('Also Resource Health annotations (the HealthResources system topic).')
param deployHealthTopic bool = true

@description('The Data Collection Rule of stage 2 (same resource group): the collector may publish to it. Empty: give the collector\'s principal id to stage 2 (agentPrincipalIds) instead.')
param dataCollectionRuleName string = ''

@description('Reader on this subscription for Resource Graph (collect --resource-graph, or the periodic pass).')
param resourceGraphReader bool = true

@description('Definition id (GUID) of Scheduled Event Contributor, when the subscription requires it; no default: no id is documented (see modules/collector-reader.bicep); empty: not assigned, the deployment goes on.')
param scheduledEventContributorRoleId string = ''

@description('An existing identity\'s object id for the collector; empty: a user-assigned identity <namePrefix>-collector is created.')
param collectorPrincipalId string = ''

param tags object = {
  application: 'se-forwarder'
  role: 'collector'
}

var metricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb' // Monitoring Metrics Publisher
var createIdentity = empty(collectorPrincipalId)

module identity 'modules/identity.bicep' = if (createIdentity) {
  name: '${namePrefix}-collector-identity'
  params: {
    name: '${namePrefix}-collector'
    location: location
    tags: tags
  }
}

var principalId = createIdentity ? identity!.outputs.principalId : collectorPrincipalId

module hub 'modules/collector.bicep' = {
  name: '${namePrefix}-collector-hub'
  params: {
    namespaceName: eventHubsNamespaceName
    hubName: eventHubName
    consumerGroupName: consumerGroupName
    collectorPrincipalId: principalId
  }
}

module checkpoints 'modules/collector-checkpoints.bicep' = {
  name: '${namePrefix}-collector-checkpoints'
  params: {
    storageAccountName: storageAccountName
    location: location
    checkpointContainerName: checkpointContainerName
    collectorPrincipalId: principalId
    tags: tags
  }
}

module topics 'modules/collector-topics.bicep' = {
  name: '${namePrefix}-collector-topics'
  params: {
    namespaceName: eventHubsNamespaceName
    hubName: eventHubName
    storageAccountName: checkpoints.outputs.accountName
    deadLetterContainerName: checkpoints.outputs.deadLetterContainerName
    deployMaintenanceTopic: deployMaintenanceTopic
    deployHealthTopic: deployHealthTopic
    namePrefix: namePrefix
    tags: tags
  }
}

module reader 'modules/collector-reader.bicep' = if (resourceGraphReader) {
  name: '${namePrefix}-collector-reader'
  scope: subscription()
  params: {
    collectorPrincipalId: principalId
    scheduledEventContributorRoleId: scheduledEventContributorRoleId
  }
}

resource dcr 'Microsoft.Insights/dataCollectionRules@2023-03-11' existing = if (!empty(dataCollectionRuleName)) {
  name: dataCollectionRuleName
}

resource publisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(dataCollectionRuleName)) {
  // known before the deployment starts (the created identity's principal id is not): the
  // identity's name, or the object id given
  name: guid(resourceGroup().id, dataCollectionRuleName, namePrefix, collectorPrincipalId, metricsPublisher)
  scope: dcr
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', metricsPublisher)
    principalId: principalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder collect writes ScheduledEventsPlatform_CL through this rule'
  }
}

@description('The collector\'s identity (client id for [identity] client_id; empty with collectorPrincipalId).')
output collectorClientId string = createIdentity ? identity!.outputs.clientId : ''

output collectorPrincipalId string = principalId

output systemTopicNames array = topics.outputs.systemTopicNames

@description('Ready-to-paste part of /etc/se-forwarder/collector.toml; add [sinks.log_analytics] from stage 2\'s agentConfigToml.')
output collectorConfigToml string = format('''[identity]
kind = "managed"
client_id = "{0}"

[collector]
namespace = "{1}.servicebus.windows.net"
hub = "{2}"
consumer_group = "{3}"
checkpoint_account_url = "{4}"
checkpoint_container = "{5}"
''', createIdentity ? identity!.outputs.clientId : '', eventHubsNamespaceName, eventHubName, hub.outputs.consumerGroupName, checkpoints.outputs.accountUrl, checkpoints.outputs.checkpointContainerName)
