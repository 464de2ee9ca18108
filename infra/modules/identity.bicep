// A user-assigned managed identity for the fleet: attach it to the VMs or scale sets that run the
// agent and put its client id in the agent config ([identity] client_id).

@description('Identity name.')
param name string

@description('Azure region.')
param location string

param tags object = {}

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output id string = identity.id
output principalId string = identity.properties.principalId
output clientId string = identity.properties.clientId
