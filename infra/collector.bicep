// The collector's stage (docs/collector.md, "Deployment recipe"): after infra/main.bicep. Azure's
// own Scheduled Events and Resource Health annotations reach a hub of the collector's own through
// Event Grid system topics; the collector reads it with its own consumer group, keeps checkpoints
// in a storage account of its own, optionally reads Resource Graph, and writes to the Data
// Collection Rule of stage 2:
//
//   infra/scripts/collector-prerequisites.sh          # preview features, providers, role ids
//   az deployment group create -g RG -n se-forwarder-collector -f infra/collector.bicep \
//     -p eventHubsNamespaceName=<namespace> dataCollectionRuleName=se-forwarder-dcr \
//        actionGroupId=<stage 2 output actionGroupId>
//
// The collector's hub is its own (platformHubName, created here in the namespace, which may sit
// in any resource group or subscription): only the system topics' identities may send to it, only
// the collector reads it. Never the agents' hub: every agent identity may send there.
//
// The collector's identity (a user-assigned identity of its own, or collectorPrincipalId) gets
// only: Azure Event Hubs Data Receiver on its hub, Storage Blob Data Contributor on the checkpoint
// container, Monitoring Metrics Publisher on the rule, optionally Storage Blob Data Reader on the
// package container, with resourceGraphReader=true, Reader and Scheduled Event Contributor on
// the subscription (which need Owner or User Access Administrator there), and with
// approveFromOutside=true (approvals through the preview acknowledge API), Log Analytics Reader on
// the agents' workspace. Every role assignment
// is made in a module that receives the principal id, and named from scope, principal and role.
targetScope = 'resourceGroup'

@description('Prefix of the names.')
param namePrefix string = 'se-forwarder'

@description('Azure region of the identity and the storage account.')
param location string = resourceGroup().location

@description('Event Hubs namespace (name, not host name) where the collector\'s hub is created: stage 2\'s (deployEventHubs=true) or your own with local auth disabled.')
param eventHubsNamespaceName string

@description('Resource group of that namespace (default: this one).')
param eventHubsNamespaceResourceGroup string = resourceGroup().name

@description('Subscription of that namespace (default: this one).')
param eventHubsNamespaceSubscriptionId string = subscription().subscriptionId

@description('The collector\'s own hub, created in the namespace: the system topics deliver to it, the collector alone reads it. Never the agents\' hub (stage 2 output eventHubName).')
@minLength(1)
@maxLength(256)
param platformHubName string = 'platform-events'

@description('Partitions of the collector\'s hub (fixed once created).')
@minValue(1)
@maxValue(32)
param platformHubPartitionCount int = 2

@description('Days the collector\'s hub keeps Azure\'s notifications: the longest the collector may be down without losing a status change (Resource Graph keeps only the current one). 1 to 7 (Standard).')
@minValue(1)
@maxValue(7)
param platformHubRetentionInDays int = 7

@description('The collector\'s consumer group on its hub.')
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

@description('The Data Collection Rule of stage 2: the collector may publish to it. Empty: give the collector\'s principal id to stage 2 (agentPrincipalIds) instead.')
param dataCollectionRuleName string = ''

@description('Resource group of that rule (default: this one).')
param dataCollectionRuleResourceGroup string = resourceGroup().name

@description('Action group notified when Event Grid cannot deliver to the hub (stage 2 output actionGroupId); empty: the alerts show in Azure Monitor only.')
param actionGroupId string = ''

@description('The Resource Graph channel: Reader and Scheduled Event Contributor on this subscription (needs scheduledEventContributorRoleId). The Event Grid channel needs neither.')
param resourceGraphReader bool = false

@description('Definition id (GUID) of Scheduled Event Contributor (infra/scripts/collector-prerequisites.sh prints it); required with resourceGraphReader=true or maintenanceProviderPrincipalId.')
param scheduledEventContributorRoleId string = ''

@description('Object id of the Maintenance resource provider\'s service principal in your tenant (application id 78315a30-673a-4a46-8e5c-ce59dbc6adf8; collector-prerequisites.sh prints it): it gets Scheduled Event Contributor on the subscription, as Microsoft\'s Resource Graph set-up asks. Empty: not assigned here.')
param maintenanceProviderPrincipalId string = ''

@description('Approvals from outside the VM (PREVIEW acknowledge API; [collector.preview_acknowledge] in the collector\'s configuration): Log Analytics Reader on the agents\' workspace, to know which VMs run an agent. Needs resourceGraphReader=true (the inventory, and Scheduled Event Contributor, the role the acknowledge checks) and agentsWorkspaceName.')
param approveFromOutside bool = false

@description('The Log Analytics workspace of the agents\' heartbeats (stage 1 or 2\'s); with approveFromOutside=true.')
param agentsWorkspaceName string = ''

@description('Resource group of that workspace (default: this one).')
param agentsWorkspaceResourceGroup string = resourceGroup().name

@description('An existing identity\'s object id for the collector; empty: a user-assigned identity <namePrefix>-collector is created.')
param collectorPrincipalId string = ''

@description('Resource id of the blob container holding the installer and the package (…/storageAccounts/<a>/blobServices/default/containers/<c>): the collector\'s identity gets Storage Blob Data Reader there, to install and upgrade. Empty: grant it yourself.')
param packageContainerResourceId string = ''

param tags object = {
  application: 'se-forwarder'
  role: 'collector'
}

var createIdentity = empty(collectorPrincipalId)
var needsRoleId = resourceGraphReader || !empty(maintenanceProviderPrincipalId)
// approvals read the inventory and act with the Resource Graph channel's Scheduled Event
// Contributor; the agents' heartbeats say which VMs they must leave alone
var approvalsWorkspace = !approveFromOutside ? '' : (!resourceGraphReader ? fail('approveFromOutside=true needs resourceGraphReader=true: the collector decides on Resource Graph\'s inventory, and the acknowledge checks Scheduled Event Contributor, which that channel holds on the subscription.') : (empty(agentsWorkspaceName) ? fail('approveFromOutside=true needs agentsWorkspaceName: the workspace of the agents\' heartbeats (the collector never approves a VM that runs an agent).') : agentsWorkspaceName))
var roleIdGiven = needsRoleId && empty(scheduledEventContributorRoleId) ? fail('resourceGraphReader=true and maintenanceProviderPrincipalId need scheduledEventContributorRoleId (Microsoft: reading the Scheduled Events rows needs Scheduled Event Contributor): infra/scripts/collector-prerequisites.sh prints it.') : scheduledEventContributorRoleId

// Nested deployments named per resource group and deployment: a second collector (another
// group, another region) never meets "InvalidDeploymentLocation" on the subscription-scope one,
// nor another collector's names in a shared namespace's group.
var suffix = uniqueString(resourceGroup().id, deployment().name)
// the container's subscription, group, account and name; a placeholder when none is given (ARM
// may evaluate a skipped module's scope), a stop with a message when it is no container id
var packageContainerParts = split(packageContainerResourceId, '/')
var packageContainer = empty(packageContainerResourceId) ? ['', '', subscription().subscriptionId, '', resourceGroup().name, '', '', '', 'none', '', '', '', 'none'] : (length(packageContainerParts) == 13 && toLower(packageContainerParts[7]) == 'storageaccounts' && toLower(packageContainerParts[11]) == 'containers' ? packageContainerParts : fail('packageContainerResourceId must be a blob container\'s resource id (/subscriptions/<id>/resourceGroups/<rg>/providers/Microsoft.Storage/storageAccounts/<account>/blobServices/default/containers/<container>), got "${packageContainerResourceId}".'))

module identity 'modules/identity.bicep' = if (createIdentity) {
  name: '${namePrefix}-collector-identity-${suffix}'
  params: {
    name: '${namePrefix}-collector'
    location: location
    tags: tags
  }
}

var principalId = createIdentity ? identity!.outputs.principalId : collectorPrincipalId

module hub 'modules/collector.bicep' = {
  name: '${namePrefix}-collector-hub-${suffix}'
  scope: resourceGroup(eventHubsNamespaceSubscriptionId, eventHubsNamespaceResourceGroup)
  params: {
    namespaceName: eventHubsNamespaceName
    hubName: platformHubName
    partitionCount: platformHubPartitionCount
    messageRetentionInDays: platformHubRetentionInDays
    consumerGroupName: consumerGroupName
    collectorPrincipalId: principalId
  }
}

module checkpoints 'modules/collector-checkpoints.bicep' = {
  name: '${namePrefix}-collector-checkpoints-${suffix}'
  params: {
    storageAccountName: storageAccountName
    location: location
    checkpointContainerName: checkpointContainerName
    collectorPrincipalId: principalId
    tags: tags
  }
}

module topics 'modules/collector-topics.bicep' = {
  name: '${namePrefix}-collector-topics-${suffix}'
  params: {
    deployMaintenanceTopic: deployMaintenanceTopic
    deployHealthTopic: deployHealthTopic
    namePrefix: namePrefix
    tags: tags
  }
}

module senders 'modules/collector-senders.bicep' = {
  name: '${namePrefix}-collector-senders-${suffix}'
  scope: resourceGroup(eventHubsNamespaceSubscriptionId, eventHubsNamespaceResourceGroup)
  params: {
    namespaceName: eventHubsNamespaceName
    hubName: hub.outputs.hubName
    topicPrincipalIds: topics.outputs.principalIds
  }
}

module delivery 'modules/collector-delivery.bicep' = {
  name: '${namePrefix}-collector-delivery-${suffix}'
  dependsOn: [
    senders
  ]
  params: {
    topics: topics.outputs.topics
    hubId: hub.outputs.hubId
    storageAccountName: checkpoints.outputs.accountName
    deadLetterContainerName: checkpoints.outputs.deadLetterContainerName
  }
}

module alerts 'modules/collector-alerts.bicep' = {
  name: '${namePrefix}-collector-alerts-${suffix}'
  params: {
    topics: topics.outputs.topics
    actionGroupId: actionGroupId
    tags: tags
  }
}

module reader 'modules/collector-reader.bicep' = if (needsRoleId) {
  name: '${namePrefix}-collector-reader-${suffix}'
  scope: subscription()
  params: {
    collectorPrincipalId: principalId
    resourceGraphReader: resourceGraphReader
    scheduledEventContributorRoleId: roleIdGiven
    maintenanceProviderPrincipalId: maintenanceProviderPrincipalId
  }
}

module publisher 'modules/collector-publisher.bicep' = if (!empty(dataCollectionRuleName)) {
  name: '${namePrefix}-collector-publisher-${suffix}'
  scope: resourceGroup(dataCollectionRuleResourceGroup)
  params: {
    dataCollectionRuleName: dataCollectionRuleName
    collectorPrincipalId: principalId
  }
}

module agentsReader 'modules/collector-agents-reader.bicep' = if (approveFromOutside) {
  name: '${namePrefix}-collector-agents-${suffix}'
  scope: resourceGroup(agentsWorkspaceResourceGroup)
  params: {
    workspaceName: approvalsWorkspace
    collectorPrincipalId: principalId
  }
}

module packageReader 'modules/package-reader.bicep' = if (!empty(packageContainerResourceId)) {
  name: '${namePrefix}-collector-package-${suffix}'
  scope: resourceGroup(packageContainer[2], packageContainer[4])
  params: {
    storageAccountName: packageContainer[8]
    containerName: last(packageContainer)
    principalId: principalId
  }
}

@description('The collector\'s identity (client id for [identity] client_id; empty with collectorPrincipalId).')
output collectorClientId string = createIdentity ? identity!.outputs.clientId : ''

output collectorPrincipalId string = principalId

output systemTopicNames array = topics.outputs.systemTopicNames

output platformHubName string = hub.outputs.hubName

output alertNames array = alerts.outputs.alertNames

@description('Ready-to-paste part of /etc/se-forwarder/collector.toml; add [sinks.log_analytics] from stage 2\'s agentConfigToml.')
output collectorConfigToml string = format('''[identity]
kind = "managed"
client_id = "{0}"

[collector]
namespace = "{1}"
hub = "{2}"
consumer_group = "{3}"
checkpoint_account_url = "{4}"
checkpoint_container = "{5}"
''', createIdentity ? identity!.outputs.clientId : '', hub.outputs.fullyQualifiedNamespace, hub.outputs.hubName, hub.outputs.consumerGroupName, checkpoints.outputs.accountUrl, checkpoints.outputs.checkpointContainerName)

@description('The first deployment\'s check (docs/collector.md, step 6): run in the workspace 15 minutes after the collector started; no row while Event Grid reports deliveries: see "When deliveries fail".')
output firstRowsQuery string = 'ScheduledEventsPlatform_CL | where TimeGenerated > ago(1d) | summarize Rows = count(), Events = dcount(EventId), Last = max(TimeGenerated) by Channel'
