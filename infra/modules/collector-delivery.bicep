// The system topics' event subscriptions into the collector's hub (docs/collector.md), delivered
// with each topic's own identity (the namespace accepts no SAS keys), and the dead-letter
// container's writer role for those identities. What the hub refuses for 24 hours (30 attempts)
// is dead-lettered into the checkpoint account's dead-letter container, not dropped; the metric
// alerts of modules/collector-alerts.bicep say when that happens.
//
// Runs after modules/collector-senders.bicep (Data Sender on the hub): Event Grid checks the
// topic identity's right when the subscription is created, and a role assignment takes minutes
// to propagate, so a first deployment can fail here with a permission error; deploying the stage
// again (it is idempotent) completes it (docs/collector.md, "Deployment recipe").

@description('The system topics (modules/collector-topics.bicep output topics).')
param topics array

@description('Resource id of the collector\'s hub (any resource group or subscription).')
param hubId string

@description('Storage account of the checkpoints (modules/collector-checkpoints.bicep), in this resource group.')
param storageAccountName string

@description('Its dead-letter container.')
param deadLetterContainerName string = 'eventgrid-deadletter'

var blobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe' // Storage Blob Data Contributor

// An event subscription's name: 3 to 64 letters, digits and hyphens; a hub name may also hold
// '.' and '_' and be 256 characters long.
var subscriptionName = take('to-${replace(replace(last(split(hubId, '/')), '.', '-'), '_', '-')}', 64)

resource topicResources 'Microsoft.EventGrid/systemTopics@2025-02-15' existing = [for t in topics: {
  name: t.name
}]

resource account 'Microsoft.Storage/storageAccounts@2025-01-01' existing = {
  name: storageAccountName
}

resource blobs 'Microsoft.Storage/storageAccounts/blobServices@2025-01-01' existing = {
  parent: account
  name: 'default'
}

resource deadLetters 'Microsoft.Storage/storageAccounts/blobServices/containers@2025-01-01' existing = {
  parent: blobs
  name: deadLetterContainerName
}

resource deadLetterWriters 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for t in topics: {
  name: guid(deadLetters.id, t.principalId, blobDataContributor)
  scope: deadLetters
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataContributor)
    principalId: t.principalId
    principalType: 'ServicePrincipal'
    description: 'Event Grid system topic ${t.name} dead-letters what the collector\'s hub refused'
  }
}]

resource toHub 'Microsoft.EventGrid/systemTopics/eventSubscriptions@2025-02-15' = [for (t, i) in topics: {
  parent: topicResources[i]
  name: subscriptionName
  dependsOn: [
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
          resourceId: hubId
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

output eventSubscriptionName string = subscriptionName
