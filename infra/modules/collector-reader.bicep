// The collector's rights for the Resource Graph channel (`collect --resource-graph`, or the
// periodic pass beside the hub), at the subscription, the scope Resource Graph answers for. One
// answer, the one Microsoft's pages give (../shared/spec/platform-channels.md, "Opting in"):
// reading the Scheduled Events rows needs **Scheduled Event Contributor**; Reader is kept beside
// it for `healthresources` (the annotations). The Event Grid channel needs neither: the collector
// reads its hub with Azure Event Hubs Data Receiver (modules/collector.bicep).
//
// The role's definition id has no default here: that page names the role but gives no id, nothing
// else this project holds documents one (../shared/seeds, and ../shared/azure-types has no role
// definitions), and a guessed GUID would assign some other role or fail the deployment.
// infra/scripts/collector-prerequisites.sh looks it up in your tenant (`az role definition list
// --name "Scheduled Event Contributor" --query [0].name -o tsv`) and prints it with the
// Maintenance resource provider's object id. infra/collector.bicep refuses resourceGraphReader=true
// without it; anything but a definition id (a GUID) stops the deployment before anything is
// created.
targetScope = 'subscription'

@description('Object id of the collector\'s identity.')
param collectorPrincipalId string

@allowed(['ServicePrincipal', 'User', 'Group'])
param collectorPrincipalType string = 'ServicePrincipal'

@description('Reader and Scheduled Event Contributor for the collector (the Resource Graph channel).')
param resourceGraphReader bool = true

@description('Definition id (a GUID) of Scheduled Event Contributor; empty: not assigned.')
param scheduledEventContributorRoleId string = ''

@description('Object id, in your tenant, of the Maintenance resource provider\'s service principal (application id 78315a30-673a-4a46-8e5c-ce59dbc6adf8: az ad sp show --id 78315a30-673a-4a46-8e5c-ce59dbc6adf8 --query id -o tsv). With scheduledEventContributorRoleId it gets Scheduled Event Contributor on the subscription (step 4 of Microsoft\'s Resource Graph page); empty: not assigned.')
param maintenanceProviderPrincipalId string = ''

var reader = 'acdd72a7-3385-48ef-bd42-f606fba81ae7' // Reader

// '' or the GUID given (a role's name, e.g. "Scheduled Event Contributor", is refused with how
// to find its id)
var scheduledEventContributor = empty(scheduledEventContributorRoleId) ? '' : (length(scheduledEventContributorRoleId) == 36 && join(map(split(scheduledEventContributorRoleId, '-'), part => string(length(part))), ',') == '8,4,4,4,12' ? toLower(scheduledEventContributorRoleId) : fail('scheduledEventContributorRoleId must be a role definition id (a GUID), not "${scheduledEventContributorRoleId}": az role definition list --name "Scheduled Event Contributor" --query [0].name -o tsv; or leave it empty (no assignment).'))

resource readerAssignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (resourceGraphReader) {
  name: guid(subscription().id, collectorPrincipalId, reader)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', reader)
    principalId: collectorPrincipalId
    principalType: collectorPrincipalType
    description: 'se-forwarder collect reads maintenanceresources and healthresources in Resource Graph'
  }
}

// The Maintenance resource provider publishes the events into Resource Graph and Event Grid on the
// subscription's behalf; Microsoft's set-up gives its service principal Scheduled Event
// Contributor. Named from scope, principal and role like every assignment here.
resource maintenanceProvider 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(scheduledEventContributor) && !empty(maintenanceProviderPrincipalId)) {
  name: guid(subscription().id, maintenanceProviderPrincipalId, scheduledEventContributor)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', scheduledEventContributor)
    principalId: maintenanceProviderPrincipalId
    principalType: 'ServicePrincipal'
    description: 'the Maintenance resource provider publishes Scheduled Events to Resource Graph and Event Grid'
  }
}

resource scheduledEvents 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (resourceGraphReader && !empty(scheduledEventContributor)) {
  name: guid(subscription().id, collectorPrincipalId, scheduledEventContributor)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', scheduledEventContributor)
    principalId: collectorPrincipalId
    principalType: collectorPrincipalType
    description: 'se-forwarder collect reads the platform\'s Scheduled Events'
  }
}
