// se-forwarder: the Azure side in one resource-group deployment.
//
//   az deployment group create -g <rg> -f infra/main.bicep -p infra/main.parameters.example.json
//
// Creates (or reuses) a Log Analytics workspace, the tables ScheduledEvents_CL and
// ScheduledEventsAgent_CL, a Direct Data Collection Rule (optionally with a Data Collection
// Endpoint), a user-assigned identity for the fleet, Monitoring Metrics Publisher on the rule,
// optionally Event Hubs (namespace, hub, consumer group, Data Sender on the hub), an action group
// and the alert rules, and two workbooks. See infra/README.md.

targetScope = 'resourceGroup'

@description('Prefix of every resource name (lowercase letters, digits and hyphens).')
@minLength(3)
@maxLength(20)
param namePrefix string = 'se-forwarder'

@description('Azure region of everything; with an existing workspace it must be the workspace\'s region (Data Collection Rules ingest only into their own region).')
param location string = resourceGroup().location

@description('Resource id of an existing Log Analytics workspace to use; empty = create one.')
param existingWorkspaceResourceId string = ''

@description('Name of the workspace to create (when existingWorkspaceResourceId is empty).')
param workspaceName string = '${namePrefix}-law'

@description('Interactive (Analytics plan) retention of the two tables, in days.')
@minValue(4)
@maxValue(730)
param tableRetentionInDays int = 90

@description('Total retention of the two tables including long-term archive, in days.')
@minValue(4)
@maxValue(4383)
param tableTotalRetentionInDays int = 365

@description('Also create a Data Collection Endpoint: a separate logs-ingestion endpoint (its public access can be disabled). Linking it to an Azure Monitor Private Link Scope (AMPLS) is not part of this template. Otherwise agents use the Direct rule\'s own endpoint.')
param useDataCollectionEndpoint bool = false

@description('Create a user-assigned identity for the fleet (attach it to the VMs / scale sets). It gets the same roles as agentPrincipalIds.')
param createFleetIdentity bool = true

@description('Principal (object) ids of existing identities running the agent (VM or scale-set system-assigned identities, other user-assigned identities). They get Monitoring Metrics Publisher on the rule and, with Event Hubs, Data Sender on the hub: one or two role assignments each. For a fleet, attach the fleet identity or use agentGroupObjectIds instead (a subscription holds at most 4,000 role assignments, a deployment at most 800 resources).')
@maxLength(200)
param agentPrincipalIds array = []

@description('Object ids of Microsoft Entra security groups whose members (the VMs\' managed identities) run the agent. They get the same roles as agentPrincipalIds, with one role assignment per group however many VMs it holds (a group membership takes effect at the identity\'s next token, up to 24 hours).')
@maxLength(20)
param agentGroupObjectIds array = []

@description('Create the Event Hubs sink.')
param deployEventHubs bool = false

@description('Event Hubs namespace name (globally unique).')
@maxLength(50)
param eventHubsNamespaceName string = '${namePrefix}-${uniqueString(resourceGroup().id)}'

@description('Event hub name.')
param eventHubName string = 'scheduled-events'

@description('Partitions of the event hub.')
@minValue(1)
@maxValue(32)
param eventHubPartitionCount int = 4

@description('Consumer group for downstream readers of the hub.')
param eventHubConsumerGroup string = 'se-forwarder-readers'

@description('Create the alert rules (an action group is created only when there is a receiver).')
param deployAlerts bool = true

@description('Email addresses notified by the alerts.')
param alertEmails array = []

@description('Webhook URLs notified by the alerts, as {"urls": ["https://..."]} (secure: URLs often carry a key).')
@secure()
param alertWebhookUrls object = {
  urls: []
}

@description('"Many VMs hit at once": alert when more than this many distinct VMs start an event within 10 minutes.')
@minValue(1)
param manyVmsThreshold int = 5

@description('"Many VMs hit at once": event types not counted (default Terminate and Preempt: scale-in, deletion, Spot eviction).')
param manyVmsExcludedEventTypes array = [
  'Terminate'
  'Preempt'
]

@description('"Many VMs hit at once": do not count events a user caused (EventSource "User").')
param manyVmsExcludeUserEvents bool = true

@description('Also create the per-VM "impactful event scheduled" rule (one alert per VM and EventId, on the VM). The fleet-level rule (one alert per EventId) is always created. Turn it off for fleets over a few hundred VMs: a rule raises at most 300 stateful alerts per evaluation.')
param perVmImpactfulAlert bool = true

@description('Create the two workbooks.')
param deployWorkbooks bool = true

@description('Tags applied to every resource.')
param tags object = {
  application: 'se-forwarder'
}

var contract = loadJsonContent('../src/se_forwarder/contract.json')
var useExistingWorkspace = !empty(existingWorkspaceResourceId)
var workspaceResourceId = useExistingWorkspace ? existingWorkspaceResourceId : resourceId('Microsoft.OperationalInsights/workspaces', workspaceName)
// /subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.OperationalInsights/workspaces/<name>
var workspaceIdParts = split(workspaceResourceId, '/')
var workspaceSubscriptionId = workspaceIdParts[2]
var workspaceResourceGroup = workspaceIdParts[4]
var effectiveWorkspaceName = last(workspaceIdParts)

module workspace 'modules/workspace.bicep' = if (!useExistingWorkspace) {
  name: '${namePrefix}-workspace'
  params: {
    name: workspaceName
    location: location
    tags: tags
  }
}

module tables 'modules/tables.bicep' = {
  name: '${namePrefix}-tables'
  scope: resourceGroup(workspaceSubscriptionId, workspaceResourceGroup)
  params: {
    workspaceName: effectiveWorkspaceName
    retentionInDays: tableRetentionInDays
    totalRetentionInDays: tableTotalRetentionInDays
  }
  dependsOn: [
    workspace
  ]
}

module identity 'modules/identity.bicep' = if (createFleetIdentity) {
  name: '${namePrefix}-identity'
  params: {
    name: '${namePrefix}-agents'
    location: location
    tags: tags
  }
}

var principalIds = union(agentPrincipalIds, createFleetIdentity ? [
  identity.outputs.principalId
] : [])

module dcr 'modules/dcr.bicep' = {
  name: '${namePrefix}-dcr'
  params: {
    name: '${namePrefix}-dcr'
    location: location
    workspaceResourceId: workspaceResourceId
    useDataCollectionEndpoint: useDataCollectionEndpoint
    publisherPrincipalIds: principalIds
    publisherGroupIds: agentGroupObjectIds
    tags: tags
  }
  // The rule's output streams must exist as tables before it is created.
  dependsOn: [
    tables
  ]
}

module eventHubs 'modules/event-hubs.bicep' = if (deployEventHubs) {
  name: '${namePrefix}-event-hubs'
  params: {
    namespaceName: eventHubsNamespaceName
    location: location
    hubName: eventHubName
    partitionCount: eventHubPartitionCount
    consumerGroupName: eventHubConsumerGroup
    senderPrincipalIds: principalIds
    senderGroupIds: agentGroupObjectIds
    tags: tags
  }
}

module alerts 'modules/alerts.bicep' = if (deployAlerts) {
  name: '${namePrefix}-alerts'
  params: {
    location: location
    workspaceResourceId: workspaceResourceId
    namePrefix: namePrefix
    alertEmails: alertEmails
    alertWebhookUrls: alertWebhookUrls
    manyVmsThreshold: manyVmsThreshold
    manyVmsExcludedEventTypes: manyVmsExcludedEventTypes
    manyVmsExcludeUserEvents: manyVmsExcludeUserEvents
    perVmImpactfulAlert: perVmImpactfulAlert
    tags: tags
  }
  // The rules' queries name the custom tables.
  dependsOn: [
    tables
  ]
}

module workbooks 'modules/workbooks.bicep' = if (deployWorkbooks) {
  name: '${namePrefix}-workbooks'
  params: {
    location: location
    workspaceResourceId: workspaceResourceId
    tags: tags
  }
  dependsOn: [
    tables
  ]
}

var identityClientId = createFleetIdentity ? identity.outputs.clientId : ''
var eventHubsNamespace = deployEventHubs ? eventHubs.outputs.fullyQualifiedNamespace : ''
var eventHubsHub = deployEventHubs ? eventHubs.outputs.hubName : ''

@description('Resource id of the Log Analytics workspace.')
output workspaceResourceId string = workspaceResourceId

@description('Logs-ingestion endpoint ([sinks.log_analytics] endpoint).')
output logsIngestionEndpoint string = dcr.outputs.logsIngestionEndpoint

@description('Immutable id of the Data Collection Rule ([sinks.log_analytics] dcr_immutable_id).')
output dcrImmutableId string = dcr.outputs.immutableId

@description('Stream of the lifecycle records ([sinks.log_analytics] records_stream).')
output recordsStream string = contract.tables.records.stream

@description('Stream of the heartbeats ([sinks.log_analytics] heartbeats_stream).')
output heartbeatsStream string = contract.tables.heartbeats.stream

@description('Client id of the fleet identity ([identity] client_id); empty when not created.')
output identityClientId string = identityClientId

@description('Resource id of the fleet identity (attach it to VMs / scale sets); empty when not created.')
output identityResourceId string = createFleetIdentity ? identity.outputs.id : ''

@description('Event Hubs fully qualified namespace ([sinks.event_hubs] namespace); empty without Event Hubs.')
output eventHubsNamespace string = eventHubsNamespace

@description('Event hub name ([sinks.event_hubs] hub); empty without Event Hubs.')
output eventHubName string = eventHubsHub

@description('Ready-to-paste part of /etc/se-forwarder/config.toml for these resources.')
output agentConfigToml string = format('''[identity]
kind = "managed"
client_id = "{0}"

[sinks.log_analytics]
endpoint = "{1}"
dcr_immutable_id = "{2}"
records_stream = "{3}"
heartbeats_stream = "{4}"
{5}''', identityClientId, dcr.outputs.logsIngestionEndpoint, dcr.outputs.immutableId, contract.tables.records.stream, contract.tables.heartbeats.stream, deployEventHubs ? format('''
[sinks.event_hubs]
namespace = "{0}"
hub = "{1}"
''', eventHubsNamespace, eventHubsHub) : '')
