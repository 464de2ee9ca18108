// The Data Collection Rule the agents send to (Logs Ingestion API), an optional Data Collection
// Endpoint, and Monitoring Metrics Publisher on the rule for the agents' identities.
// Stream declarations come from src/se_forwarder/contract.json (typeMap.dcr); the transforms from
// dashboards/queries/transforms/ (held to the transformation subset by tests/infra/test_kql.py).

@description('Name of the Data Collection Rule.')
param name string

@description('Azure region: must be the workspace\'s region.')
param location string

@description('Resource id of the destination Log Analytics workspace.')
param workspaceResourceId string

@description('Also create a Data Collection Endpoint: a separate logs-ingestion endpoint whose public access can be disabled, and the rule is then not of kind Direct, so it has no (always public) endpoint of its own beside it. Linking it to an Azure Monitor Private Link Scope (AMPLS) and the private endpoint are not part of this template. Otherwise the rule, of kind Direct, has its own logs-ingestion endpoint.')
param useDataCollectionEndpoint bool = false

@description('Public network access of the Data Collection Endpoint (only with useDataCollectionEndpoint; main.bicep refuses Disabled without it).')
@allowed([
  'Enabled'
  'Disabled'
])
param endpointPublicNetworkAccess string = 'Enabled'

@description('Principal (object) ids that get Monitoring Metrics Publisher on the rule: main.bicep\'s agentPrincipalIds (at most 200) and the fleet identity.')
@maxLength(201)
param publisherPrincipalIds array = []

@description('Object ids of Microsoft Entra groups that get Monitoring Metrics Publisher on the rule (one assignment per group, for fleets).')
@maxLength(20)
param publisherGroupIds array = []

@description('Principal type of publisherPrincipalIds (managed identities are ServicePrincipal).')
param publisherPrincipalType string = 'ServicePrincipal'

param tags object = {}

var contract = loadJsonContent('../../src/se_forwarder/contract.json')
var dcrTypes = contract.typeMap.dcr
var transforms = {
  records: loadTextContent('../../dashboards/queries/transforms/records.kql')
  heartbeats: loadTextContent('../../dashboards/queries/transforms/heartbeats.kql')
  platform: loadTextContent('../../dashboards/queries/transforms/platform.kql')
}
// Monitoring Metrics Publisher: the role the Logs Ingestion API checks on the rule.
var monitoringMetricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb'
var destinationName = 'workspace'

resource dce 'Microsoft.Insights/dataCollectionEndpoints@2023-03-11' = if (useDataCollectionEndpoint) {
  name: '${name}-dce'
  location: location
  tags: tags
  properties: {
    description: 'se-forwarder logs-ingestion endpoint'
    networkAcls: {
      publicNetworkAccess: endpointPublicNetworkAccess
    }
  }
}

resource dcr 'Microsoft.Insights/dataCollectionRules@2023-03-11' = {
  name: name
  location: location
  tags: tags
  // Direct: the rule has its own logs-ingestion endpoint (public). Behind a DCE it must not: the
  // agents use the DCE, whose public access can be disabled.
  kind: useDataCollectionEndpoint ? null : 'Direct'
  properties: {
    description: 'se-forwarder: Azure Scheduled Events lifecycle records and agent heartbeats'
    dataCollectionEndpointId: useDataCollectionEndpoint ? dce!.id : null
    streamDeclarations: toObject(items(contract.tables), t => t.value.stream, t => {
      columns: map(t.value.columns, c => {
        name: c.name
        type: dcrTypes[c.type]
      })
    })
    destinations: {
      logAnalytics: [
        {
          name: destinationName
          workspaceResourceId: workspaceResourceId
        }
      ]
    }
    dataFlows: map(items(contract.tables), t => {
      streams: [
        t.value.stream
      ]
      destinations: [
        destinationName
      ]
      transformKql: transforms[t.key]
      outputStream: 'Custom-${t.value.table}'
    })
  }
}

resource publishers 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for principalId in publisherPrincipalIds: {
  name: guid(dcr.id, principalId, monitoringMetricsPublisher)
  scope: dcr
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: principalId
    principalType: publisherPrincipalType
    description: 'se-forwarder agents send records to this Data Collection Rule'
  }
}]

resource publisherGroups 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for groupId in publisherGroupIds: {
  name: guid(dcr.id, groupId, monitoringMetricsPublisher)
  scope: dcr
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: groupId
    principalType: 'Group'
    description: 'se-forwarder agents (members of this group) send records to this Data Collection Rule'
  }
}]

output id string = dcr.id
output name string = dcr.name
output immutableId string = dcr.properties.immutableId
@description('The logs-ingestion endpoint the agents send to (the DCE\'s when there is one, else the rule\'s own).')
output logsIngestionEndpoint string = useDataCollectionEndpoint ? dce!.properties.logsIngestion.endpoint : dcr.properties.endpoints.logsIngestion
output streams object = toObject(items(contract.tables), t => t.key, t => t.value.stream)
