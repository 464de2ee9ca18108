// The collector's checkpoint store (docs/collector.md): a storage account reached only with Entra
// tokens (no shared keys, no public blobs, TLS 1.2), a container for the Event Hubs checkpoints and
// ownership blobs (azure-eventhub-checkpointstoreblob) and one for the notifications Event Grid
// could not deliver to the hub (dead-lettered rather than dropped after the retry window). The
// collector's identity may read and write blobs in the checkpoint container only.

@description('Storage account name (3 to 24 lowercase letters and digits, unique in Azure).')
@minLength(3)
@maxLength(24)
param storageAccountName string

@description('Azure region.')
param location string

@description('Container of the checkpoints and partition ownerships ([collector] checkpoint_container).')
param checkpointContainerName string = 'se-forwarder-collector'

@description('Container where Event Grid dead-letters what it could not deliver to the hub.')
param deadLetterContainerName string = 'eventgrid-deadletter'

@description('Object id of the collector\'s identity.')
param collectorPrincipalId string

@allowed(['ServicePrincipal', 'User', 'Group'])
param collectorPrincipalType string = 'ServicePrincipal'

@allowed(['Standard_LRS', 'Standard_ZRS', 'Standard_GRS'])
param skuName string = 'Standard_LRS'

param tags object = {}

var blobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe' // Storage Blob Data Contributor

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: storageAccountName
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: skuName
  }
  properties: {
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    allowBlobPublicAccess: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    accessTier: 'Hot'
  }
}

resource blobs 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: account
  name: 'default'
}

resource checkpoints 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobs
  name: checkpointContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource deadLetters 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobs
  name: deadLetterContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource checkpointWriter 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(checkpoints.id, collectorPrincipalId, blobDataContributor)
  scope: checkpoints
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataContributor)
    principalId: collectorPrincipalId
    principalType: collectorPrincipalType
    description: 'se-forwarder collect keeps its Event Hubs checkpoints and ownerships here'
  }
}

output accountName string = account.name
output accountUrl string = account.properties.primaryEndpoints.blob
output checkpointContainerName string = checkpoints.name
output deadLetterContainerName string = deadLetters.name
