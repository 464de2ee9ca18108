// A new Log Analytics workspace (used only when main.bicep is not given an existing one).

@description('Workspace name.')
param name string

@description('Azure region.')
param location string

@description('Workspace default retention, in days (the custom tables carry their own).')
@minValue(30)
@maxValue(730)
param retentionInDays int = 30

@description('Daily ingestion cap in GB; -1 = no cap.')
param dailyQuotaGb int = -1

param tags object = {}

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
    workspaceCapping: {
      dailyQuotaGb: dailyQuotaGb
    }
    features: {
      enableLogAccessUsingOnlyResourcePermissions: true
      // Microsoft Entra authentication only: no ingestion or query with the workspace keys (the
      // agents use the Logs Ingestion API with managed identities, which this does not affect)
      disableLocalAuth: true
    }
    publicNetworkAccessForIngestion: 'Enabled'
    publicNetworkAccessForQuery: 'Enabled'
  }
}

output id string = workspace.id
output name string = workspace.name
output customerId string = workspace.properties.customerId
