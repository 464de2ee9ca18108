// Azure's own Scheduled Events (and, optionally, Resource Health annotations) for the whole
// subscription (docs/collector.md): one Event Grid system topic per Resource Notifications topic
// type, each with a system-assigned identity. Their rights (modules/collector-senders.bicep,
// modules/collector-delivery.bicep) and event subscriptions (collector-delivery.bicep) come from
// modules that receive the identities' principal ids as parameters, so every assignment is named
// from scope, principal and role.
//
// Azure allows one system topic per topic type and source (here: the subscription), and these are
// two types, MaintenanceResources and HealthResources: where the subscription already has a topic
// of one type, deploy without it and add an event subscription to yours
// (deployMaintenanceTopic=false or deployHealthTopic=false, docs/collector.md).

@description('The MaintenanceResources topic (false where the subscription has one already).')
param deployMaintenanceTopic bool = true

@description('Also the Resource Health annotations (ResourceAnnotated: what the platform did to each VM).')
param deployHealthTopic bool = true

@description('Name prefix of the system topics.')
param namePrefix string = 'se-forwarder'

param tags object = {}

// includedEventTypes null: every event type of the topic (the collector counts the ones it
// ignores); the health topic also emits availability changes, which the collector does not need.
var maintenance = {
  name: '${namePrefix}-maintenance'
  topicType: 'Microsoft.ResourceNotifications.MaintenanceResources'
  eventTypes: null
}
var health = {
  name: '${namePrefix}-health'
  topicType: 'Microsoft.ResourceNotifications.HealthResources'
  eventTypes: [
    'Microsoft.ResourceNotifications.HealthResources.ResourceAnnotated'
  ]
}
var topics = concat(deployMaintenanceTopic ? [maintenance] : [], deployHealthTopic ? [health] : [])

// Subscription-wide topics live in a resource group with the location 'global'.
resource systemTopics 'Microsoft.EventGrid/systemTopics@2025-02-15' = [for t in topics: {
  name: t.name
  location: 'global'
  tags: tags
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    source: subscription().id
    topicType: t.topicType
  }
}]

@description('The topics: name, event types, the identity\'s principal id.')
output topics array = [for (t, i) in topics: {
  name: systemTopics[i].name
  eventTypes: t.eventTypes
  principalId: systemTopics[i].identity.principalId
}]
output principalIds array = [for (t, i) in topics: systemTopics[i].identity.principalId]
output systemTopicNames array = [for (t, i) in topics: systemTopics[i].name]
