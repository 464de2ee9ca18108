// The two shared workbooks. Their JSON lives in dashboards/ (loadTextContent): one home, validated
// against the workbook schema and analyzed as KQL by the tests.

@description('Azure region of the workbooks.')
param location string

@description('Resource id of the Log Analytics workspace the workbooks open on.')
param workspaceResourceId string

@description('Prefix of the workbooks\' display names.')
param displayNamePrefix string = 'Scheduled Events'

param tags object = {}

var workbooks = [
  {
    key: 'fleet'
    displayName: '${displayNamePrefix}: fleet view'
    description: 'Azure Scheduled Events across the fleet: open and upcoming events, impact, notice, where they land, and agent coverage.'
    serializedData: loadTextContent('../../dashboards/scheduled-events.workbook.json')
  }
  {
    key: 'agent-health'
    displayName: '${displayNamePrefix}: agent health'
    description: 'se-forwarder agents: heartbeats, versions, poll errors, spool depth, failed deliveries and silent agents.'
    serializedData: loadTextContent('../../dashboards/agent-health.workbook.json')
  }
]

resource workbookResources 'Microsoft.Insights/workbooks@2023-06-01' = [for wb in workbooks: {
  // A workbook's name must be a GUID; stable per resource group and workbook.
  name: guid(resourceGroup().id, 'se-forwarder-workbook', wb.key)
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: wb.displayName
    description: wb.description
    category: 'workbook'
    sourceId: workspaceResourceId
    serializedData: wb.serializedData
    version: 'Notebook/1.0'
  }
}]

output workbookIds array = [for (wb, i) in workbooks: workbookResources[i].id]
