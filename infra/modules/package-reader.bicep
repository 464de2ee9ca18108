// Storage Blob Data Reader on the container holding the installer and the package, for one more
// identity (the collector's: install.sh downloads the bundle with it on the collector's VM, and an
// upgrade through Azure downloads again). Deployed into the storage account's resource group; the
// principal is a parameter here, so the assignment is named from scope, principal and role.

@description('Storage account holding the package (existing), in this resource group.')
param storageAccountName string

@description('Its container holding the installer and the package.')
param containerName string

@description('Object id of the identity that downloads.')
param principalId string

@allowed(['ServicePrincipal', 'User', 'Group'])
param principalType string = 'ServicePrincipal'

var blobDataReader = '2a2b9908-6ea1-4ae2-8e65-a410df84e7d1' // Storage Blob Data Reader

resource account 'Microsoft.Storage/storageAccounts@2025-01-01' existing = {
  name: storageAccountName
}

resource blobs 'Microsoft.Storage/storageAccounts/blobServices@2025-01-01' existing = {
  parent: account
  name: 'default'
}

resource container 'Microsoft.Storage/storageAccounts/blobServices/containers@2025-01-01' existing = {
  parent: blobs
  name: containerName
}

resource reader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(container.id, principalId, blobDataReader)
  scope: container
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataReader)
    principalId: principalId
    principalType: principalType
    description: 'se-forwarder: download the installer and the package'
  }
}
