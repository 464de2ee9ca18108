// Azure's own Scheduled Events (and, optionally, Resource Health annotations) into the collector's
// hub (docs/collector.md): one Event Grid system topic per Resource Notifications topic type, for
// the whole subscription, each with an event subscription delivering to the hub with the topic's
// own managed identity (the namespace accepts no SAS keys). What the hub refuses for 24 hours is
// dead-lettered into the checkpoint account's dead-letter container, not dropped.
//
// Least privilege: each topic's identity may send to this hub only (Azure Event Hubs Data
// Sender on the hub) and write blobs in the dead-letter container only.

@description('Event Hubs namespace holding the hub (existing).')
param namespaceName string

@description('The hub the collector reads (existing).')
param hubName string

@description('Storage account of the checkpoints (modules/collector-checkpoints.bicep).')
param storageAccountName string

@description('Its dead-letter container.')
param deadLetterContainerName string = 'eventgrid-deadletter'

@description('The MaintenanceResources topic (false where the subscription has one already: Azure allows one per topic type and source).')
param deployMaintenanceTopic bool = true

@description('Also the Resource Health annotations (ResourceAnnotated: what the platform did to each VM).')
param deployHealthTopic bool = true

@description('Name prefix of the system topics.')
param namePrefix string = 'se-forwarder'

param tags object = {}

var dataSender = '2b629674-e913-4c01-ae53-ef4638d8f975' // Azure Event Hubs Data Sender
var blobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe' // Storage Blob Data Contributor

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

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource hub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' existing = {
  parent: namespace
  name: hubName
}

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource blobs 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  parent: account
  name: 'default'
}

resource deadLetters 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = {
  parent: blobs
  name: deadLetterContainerName
}

// Subscription-wide topics live in a resource group with the location 'global'.
resource systemTopics 'Microsoft.EventGrid/systemTopics@2022-06-15' = [for t in topics: {
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

resource senders 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (t, i) in topics: {
  name: guid(hub.id, systemTopics[i].id, dataSender)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataSender)
    principalId: systemTopics[i].identity.principalId
    principalType: 'ServicePrincipal'
    description: 'Event Grid system topic ${t.name} delivers to the collector\'s hub'
  }
}]

resource deadLetterWriters 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (t, i) in topics: {
  name: guid(deadLetters.id, systemTopics[i].id, blobDataContributor)
  scope: deadLetters
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataContributor)
    principalId: systemTopics[i].identity.principalId
    principalType: 'ServicePrincipal'
    description: 'Event Grid system topic ${t.name} dead-letters what the hub refused'
  }
}]

resource toHub 'Microsoft.EventGrid/systemTopics/eventSubscriptions@2022-06-15' = [for (t, i) in topics: {
  parent: systemTopics[i]
  name: 'to-${hubName}'
  dependsOn: [
    senders
    deadLetterWriters
  ]
  properties: {
    eventDeliverySchema: 'EventGridSchema'
    filter: {
      includedEventTypes: t.eventTypes
    }
    deliveryWithResourceIdentity: {
      identity: {
        type: 'SystemAssigned'
      }
      destination: {
        endpointType: 'EventHub'
        properties: {
          resourceId: hub.id
        }
      }
    }
    retryPolicy: {
      maxDeliveryAttempts: 30
      eventTimeToLiveInMinutes: 1440
    }
    deadLetterWithResourceIdentity: {
      identity: {
        type: 'SystemAssigned'
      }
      deadLetterDestination: {
        endpointType: 'StorageBlob'
        properties: {
          resourceId: account.id
          blobContainerName: deadLetterContainerName
        }
      }
    }
  }
}]

output systemTopicNames array = [for (t, i) in topics: systemTopics[i].name]
