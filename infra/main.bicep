// se-forwarder, stage 2 of 2: the Azure side the agents send to, in one resource-group deployment.
//
//   az deployment group create -g <rg> -n se-forwarder-tables -f infra/tables.bicep     (stage 1)
//   az deployment group create -g <rg> -n se-forwarder -f infra/main.bicep \
//     -p infra/main.parameters.example.json -p workspaceResourceId=<stage 1 output>
//
// Stage 1 (infra/tables.bicep) creates or reuses the Log Analytics workspace and the tables
// ScheduledEvents_CL and ScheduledEventsAgent_CL in a deployment of its own: a Data Collection
// Rule created right after a brand-new table may not see it (InvalidOutputTable). This creates a
// Direct Data Collection Rule (or one behind a Data Collection Endpoint), a user-assigned identity
// for the fleet, Monitoring Metrics Publisher on the rule, optionally Event Hubs (namespace, hub,
// consumer group, Data Sender on the hub, optional network rules and Data Receiver), an action
// group and the alert rules, and two workbooks. The rule, endpoint, alerts and workbooks go to the
// workspace's region (a rule ingests only into a workspace of its own region). See infra/README.md.

targetScope = 'resourceGroup'

import { checkedFleet, checkedWorkspaceId, fleetSettings } from 'modules/shared.bicep'

@description('Prefix of every resource name (lowercase letters, digits and hyphens).')
@minLength(3)
@maxLength(20)
param namePrefix string = 'se-forwarder'

@description('Azure region of the fleet identity and Event Hubs. The rule, endpoint, alerts and workbooks go to the workspace\'s region, whatever this says.')
param location string = resourceGroup().location

@description('Resource id of the Log Analytics workspace holding the tables: the workspaceResourceId output of infra/tables.bicep (stage 1).')
param workspaceResourceId string

@description('Also create a Data Collection Endpoint: a separate logs-ingestion endpoint (its public access can be disabled with ingestionPublicNetworkAccess). The rule then has no endpoint of its own (not kind Direct). Linking the endpoint to an Azure Monitor Private Link Scope (AMPLS) is not part of this template. Otherwise agents use the Direct rule\'s own endpoint, which is always public.')
param useDataCollectionEndpoint bool = false

@description('Public network access of the Data Collection Endpoint: Disabled needs useDataCollectionEndpoint=true and your own AMPLS and private endpoint.')
@allowed([
  'Enabled'
  'Disabled'
])
param ingestionPublicNetworkAccess string = 'Enabled'

@description('Create a user-assigned identity for the fleet (attach it to the VMs / scale sets). It gets the same roles as agentPrincipalIds.')
param createFleetIdentity bool = true

@description('Principal (object) ids of existing identities running the agent (VM or scale-set system-assigned identities, other user-assigned identities), at most 200 (with the fleet identity, the rule gets up to 201 publishers). They get Monitoring Metrics Publisher on the rule and, with Event Hubs, Data Sender on the hub: one or two role assignments each. For a fleet, attach the fleet identity or use agentGroupObjectIds instead (a subscription holds at most 4,000 role assignments, a deployment at most 800 resources).')
@maxLength(200)
param agentPrincipalIds array = []

@description('Object ids of Microsoft Entra security groups whose members (the VMs\' managed identities) run the agent. They get the same roles as agentPrincipalIds, with one role assignment per group however many VMs it holds (a group membership takes effect at the identity\'s next token, up to 24 hours).')
@maxLength(20)
param agentGroupObjectIds array = []

@description('Create the Event Hubs sink.')
param deployEventHubs bool = false

@description('Event Hubs namespace name (globally unique, 8-50 characters: a letter first, then letters, digits and hyphens, a letter or digit last).')
@minLength(8)
@maxLength(50)
param eventHubsNamespaceName string = '${namePrefix}-${uniqueString(resourceGroup().id)}'

@description('Event hub name; the hub is created as <name>-p<partitions> (see eventHubPartitionCount).')
param eventHubName string = 'scheduled-events'

@description('Partitions of the event hub. A Standard hub cannot change its partition count after creation: another value creates a new hub <eventHubName>-p<count> (the eventHubName output and the agents\' config change; move the readers, then delete the old hub).')
@minValue(1)
@maxValue(32)
param eventHubPartitionCount int = 4

@description('Consumer group for downstream readers of the hub.')
param eventHubConsumerGroup string = 'se-forwarder-readers'

@description('Throughput units of the Event Hubs namespace (1-40). Leave it out on re-deployments: it is then left out of the request, and the namespace keeps what was set by hand or by auto-inflate (a new namespace gets 1).')
@minValue(1)
@maxValue(40)
param eventHubsThroughputUnits int?

@description('Event Hubs auto-inflate (Azure raises the throughput units under load, never lowers them). Leave it out to keep the namespace\'s setting (a new namespace: off).')
param eventHubsAutoInflate bool?

@description('With eventHubsAutoInflate=true: the most throughput units auto-inflate may reach (at least eventHubsThroughputUnits).')
@minValue(0)
@maxValue(40)
param eventHubsMaximumThroughputUnits int = 0

@description('Event Hubs public network access. Disabled: only private endpoints (yours to add).')
@allowed([
  'Enabled'
  'Disabled'
])
param eventHubsPublicNetworkAccess string = 'Enabled'

@description('IPv4 addresses or CIDR ranges allowed to reach Event Hubs over its public endpoint; with this or eventHubsAllowedSubnetIds set, everything else is denied. Empty (both) = no network rule.')
param eventHubsAllowedIpRanges array = []

@description('Resource ids of subnets (with the Microsoft.EventHub service endpoint) allowed to reach Event Hubs; see eventHubsAllowedIpRanges.')
param eventHubsAllowedSubnetIds array = []

@description('Principal (object) ids of downstream consumers that get Azure Event Hubs Data Receiver on the hub (the agents only send).')
@maxLength(50)
param eventHubReceiverPrincipalIds array = []

@description('Principal type of eventHubReceiverPrincipalIds: ServicePrincipal (managed identities, apps), User or Group.')
@allowed([
  'ServicePrincipal'
  'User'
  'Group'
])
param eventHubReceiverPrincipalType string = 'ServicePrincipal'

@description('Create the alert rules (an action group is created only when there is a receiver).')
param deployAlerts bool = true

@description('Email addresses notified by the alerts.')
param alertEmails array = []

@description('Webhook URLs notified by the alerts, as {"urls": ["https://..."]}. Secure (a URL often carries a key): that only keeps it out of the deployment history, so prefer alertSecureWebhooks.')
@secure()
param alertWebhookUrls object = {}

@description('Webhooks the action group calls with a Microsoft Entra token (useAadAuth: no key in the URL): [{"serviceUri": "https://...", "objectId": "<object id of the receiving app registration>", "identifierUri": "api://...", "tenantId": "<optional>"}].')
param alertSecureWebhooks array = []

@description('Create the alert rules without Azure checking their queries first. Only for a first deployment that runs moments after the tables stage, when a rule is refused because the new tables are not queryable yet; otherwise leave false, so that a query Azure cannot run fails the deployment instead of failing silently at every evaluation.')
param alertsSkipQueryValidation bool = false

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

@description('"Concurrency risk" (one alert per service): the tag naming a VM\'s service (one of the agents\' agent.tags); a VM without it belongs to its Kubernetes node pool, else its scale set, else its resource group.')
param serviceTag string = 'service'

@description('The fleet settings agentConfigToml carries ([agent] tags, [policy] preset; rules go through install.sh --policy-rules): the same object the install paths take as fleet (infra/modules/shared.bicep fleetSettings). Name serviceTag among the tags for alert 6 and the Services view.')
param agentFleet fleetSettings = {
  tags: []
  policyPreset: 'observe'
  policyRules: []
  webhookFormat: 'json'
}

@description('"Concurrency risk": alert when at least this many VMs of one service may be impacted at the same time.')
@minValue(1)
param serviceRiskVms int = 5

@description('"Concurrency risk": ...or at least this percentage of a service\'s VMs (and at least 2).')
@minValue(1)
@maxValue(100)
param serviceRiskPercent int = 50

@description('"Concurrency risk": the alert\'s severity (0 critical to 4 verbose).')
@minValue(0)
@maxValue(4)
param serviceRiskSeverity int = 2

@description('Every alert rule: the most alerts one evaluation raises; the rest fold into one alert that counts and names them (Azure keeps at most 300 alerts per evaluation).')
@minValue(2)
@maxValue(300)
param maxAlertsPerRule int = 250

@description('Create the two workbooks.')
param deployWorkbooks bool = true

@description('Tags applied to every resource.')
param tags object = {
  application: 'se-forwarder'
}

var contract = loadJsonContent('../src/se_forwarder/contract.json')
// /subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.OperationalInsights/workspaces/<name>
var workspaceIdParts = split(checkedWorkspaceId(workspaceResourceId), '/')

// The workspace (stage 1 made it, or it existed before): its region is the rule's region.
resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' existing = {
  name: workspaceIdParts[8]
  scope: resourceGroup(workspaceIdParts[2], workspaceIdParts[4])
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
  identity!.outputs.principalId
] : [])

module dcr 'modules/dcr.bicep' = {
  name: '${namePrefix}-dcr'
  params: {
    name: '${namePrefix}-dcr'
    location: workspace.location
    workspaceResourceId: workspace.id
    useDataCollectionEndpoint: useDataCollectionEndpoint
    endpointPublicNetworkAccess: ingestionPublicNetworkAccess == 'Disabled' && !useDataCollectionEndpoint ? fail('ingestionPublicNetworkAccess=Disabled needs useDataCollectionEndpoint=true: a Direct rule\'s own logs-ingestion endpoint is always public.') : ingestionPublicNetworkAccess
    publisherPrincipalIds: principalIds
    publisherGroupIds: agentGroupObjectIds
    tags: tags
  }
}

module eventHubs 'modules/event-hubs.bicep' = if (deployEventHubs) {
  name: '${namePrefix}-event-hubs'
  params: {
    namespaceName: eventHubsNamespaceName
    location: location
    hubName: eventHubName
    partitionCount: eventHubPartitionCount
    capacity: eventHubsThroughputUnits
    autoInflate: eventHubsAutoInflate
    maximumThroughputUnits: eventHubsMaximumThroughputUnits
    consumerGroupName: eventHubConsumerGroup
    publicNetworkAccess: eventHubsPublicNetworkAccess
    allowedIpRanges: eventHubsAllowedIpRanges
    allowedSubnetIds: eventHubsAllowedSubnetIds
    senderPrincipalIds: principalIds
    senderGroupIds: agentGroupObjectIds
    receiverPrincipalIds: eventHubReceiverPrincipalIds
    receiverPrincipalType: eventHubReceiverPrincipalType
    tags: tags
  }
}

module alerts 'modules/alerts.bicep' = if (deployAlerts) {
  name: '${namePrefix}-alerts'
  params: {
    location: workspace.location
    workspaceResourceId: workspace.id
    namePrefix: namePrefix
    alertEmails: alertEmails
    alertWebhookUrls: alertWebhookUrls
    alertSecureWebhooks: alertSecureWebhooks
    skipQueryValidation: alertsSkipQueryValidation
    manyVmsThreshold: manyVmsThreshold
    manyVmsExcludedEventTypes: manyVmsExcludedEventTypes
    manyVmsExcludeUserEvents: manyVmsExcludeUserEvents
    perVmImpactfulAlert: perVmImpactfulAlert
    serviceTag: serviceTag
    serviceRiskVms: serviceRiskVms
    serviceRiskPercent: serviceRiskPercent
    serviceRiskSeverity: serviceRiskSeverity
    maxAlertsPerRule: maxAlertsPerRule
    tags: tags
  }
}

module workbooks 'modules/workbooks.bicep' = if (deployWorkbooks) {
  name: '${namePrefix}-workbooks'
  params: {
    location: workspace.location
    workspaceResourceId: workspace.id
    tags: tags
  }
}

var agentFleetChecked = checkedFleet(agentFleet)
// [agent] tags (a JSON array of strings is a TOML array) and [policy] preset, when not the defaults
var agentFleetToml = '${empty(agentFleetChecked.tags) ? '' : '[agent]\ntags = ${string(agentFleetChecked.tags)}\n\n'}${agentFleetChecked.policyPreset == 'observe' ? '' : '[policy]\npreset = "${agentFleetChecked.policyPreset}"\n\n'}'
var identityClientId = createFleetIdentity ? identity!.outputs.clientId : ''
var eventHubsNamespace = deployEventHubs ? eventHubs!.outputs.fullyQualifiedNamespace : ''
var eventHubsHub = deployEventHubs ? eventHubs!.outputs.hubName : ''

@description('Resource id of the Log Analytics workspace.')
output workspaceResourceId string = workspace.id

@description('Region of the workspace, the rule and the alerts.')
output monitoringLocation string = workspace.location

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
output identityResourceId string = createFleetIdentity ? identity!.outputs.id : ''

@description('Principal (object) id of the fleet identity: give it Storage Blob Data Reader on the container holding the installer, the wheel and its lock; empty when not created.')
output identityPrincipalId string = createFleetIdentity ? identity!.outputs.principalId : ''

@description('Event Hubs fully qualified namespace ([sinks.event_hubs] namespace); empty without Event Hubs.')
output eventHubsNamespace string = eventHubsNamespace

@description('Event hub name ([sinks.event_hubs] hub): <eventHubName>-p<partitions>; empty without Event Hubs.')
output eventHubName string = eventHubsHub

@description('Event Hubs namespace name (infra/collector.bicep eventHubsNamespaceName); empty without Event Hubs.')
output eventHubsNamespaceName string = deployEventHubs ? eventHubs!.outputs.namespaceName : ''

@description('Name of the Data Collection Rule (infra/collector.bicep dataCollectionRuleName).')
output dataCollectionRuleName string = '${namePrefix}-dcr'

@description('Resource id of the alerts\' action group (infra/collector.bicep actionGroupId); empty without one.')
output actionGroupId string = deployAlerts ? alerts!.outputs.actionGroupId : ''

@description('Ready-to-paste part of /etc/se-forwarder/config.toml for these resources.')
output agentConfigToml string = format('''{6}[identity]
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
''', eventHubsNamespace, eventHubsHub) : '', agentFleetToml)
