// The collector's read right for Resource Graph (`collect --resource-graph`, or the periodic pass
// beside the hub): Reader on the subscription, the scope Resource Graph answers for. Optionally
// the Scheduled Event Contributor role, which Microsoft's pages name for reading or acknowledging
// these events (../shared/spec/platform-channels.md, "Opting in"). Its definition id has no
// default here: that page names the role but gives no id, nothing else this project holds
// documents one (../shared/seeds, and ../shared/azure-types has no role definitions), and a
// guessed GUID would assign some other role or fail the deployment. Look it up in your tenant:
// `az role definition list --name "Scheduled Event Contributor" --query [0].name -o tsv`.
// Empty (the default): no assignment is made and the deployment goes on; the collector only
// reads today (Reader is enough for Resource Graph, the hub's role for Event Grid). Anything else
// must be a definition id (a GUID), else the deployment stops before anything is created.
targetScope = 'subscription'

@description('Object id of the collector\'s identity.')
param collectorPrincipalId string

@allowed(['ServicePrincipal', 'User', 'Group'])
param collectorPrincipalType string = 'ServicePrincipal'

@description('Definition id (a GUID) of Scheduled Event Contributor; empty: not assigned.')
param scheduledEventContributorRoleId string = ''

var reader = 'acdd72a7-3385-48ef-bd42-f606fba81ae7' // Reader

// '' or the GUID given (a role's name, e.g. "Scheduled Event Contributor", is refused with how
// to find its id)
var scheduledEventContributor = empty(scheduledEventContributorRoleId) ? '' : (length(scheduledEventContributorRoleId) == 36 && join(map(split(scheduledEventContributorRoleId, '-'), part => string(length(part))), ',') == '8,4,4,4,12' ? toLower(scheduledEventContributorRoleId) : fail('scheduledEventContributorRoleId must be a role definition id (a GUID), not "${scheduledEventContributorRoleId}": az role definition list --name "Scheduled Event Contributor" --query [0].name -o tsv; or leave it empty (no assignment).'))

resource readerAssignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(subscription().id, collectorPrincipalId, reader)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', reader)
    principalId: collectorPrincipalId
    principalType: collectorPrincipalType
    description: 'se-forwarder collect reads maintenanceresources and healthresources in Resource Graph'
  }
}

resource scheduledEvents 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(scheduledEventContributor)) {
  name: guid(subscription().id, collectorPrincipalId, scheduledEventContributor)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', scheduledEventContributor)
    principalId: collectorPrincipalId
    principalType: collectorPrincipalType
    description: 'se-forwarder collect reads the platform\'s Scheduled Events'
  }
}
