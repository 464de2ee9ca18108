// Nobody reads a dead-letter container: these metric alerts say when Event Grid could not deliver
// Azure's notifications to the collector's hub (docs/collector.md, "When deliveries fail"). One
// rule per system topic and metric (a metric alert on an Event Grid system topic takes one
// resource), to the action group of stage 2 (main.bicep output actionGroupId) when one is given.
//
// - DeadLetteredCount: notifications written to the dead-letter container after 24 hours of
//   retries; the collector never sees them (read them back from the container).
// - DroppedEventCount: notifications dropped with no dead-letter destination, or when
//   dead-lettering itself failed: lost.
// - DeliveryAttemptFailCount: the hub refuses deliveries (a missing Data Sender right, a firewall
//   without trusted-service access, a deleted hub); what follows in 24 hours is a dead letter.

@description('The system topics (modules/collector-topics.bicep output topics).')
param topics array

@description('Resource id of the action group to notify (main.bicep output actionGroupId); empty: the alerts show in Azure Monitor only.')
param actionGroupId string = ''

param tags object = {}

var metrics = [
  {
    metric: 'DeadLetteredCount'
    severity: 1
    what: 'notifications dead-lettered: the collector will never see them'
  }
  {
    metric: 'DroppedEventCount'
    severity: 1
    what: 'notifications dropped: lost'
  }
  {
    metric: 'DeliveryAttemptFailCount'
    severity: 2
    what: 'deliveries to the collector\'s hub fail (rights, firewall, hub gone); dead letters follow after 24 hours'
  }
]
var rules = flatten(map(topics, t => map(metrics, m => union(m, { topic: t.name, topicId: resourceId('Microsoft.EventGrid/systemTopics', t.name) }))))

resource alerts 'Microsoft.Insights/metricAlerts@2026-01-01' = [for r in rules: {
  name: '${r.topic}-${r.metric}'
  location: 'global'
  tags: tags
  properties: {
    description: 'Event Grid system topic ${r.topic}: ${r.what} (docs/collector.md, "When deliveries fail").'
    severity: r.severity
    enabled: true
    scopes: [
      r.topicId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    autoMitigate: true
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: r.metric
          metricNamespace: 'Microsoft.EventGrid/systemTopics'
          metricName: r.metric
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Total'
        }
      ]
    }
    actions: empty(actionGroupId) ? [] : [
      {
        actionGroupId: actionGroupId
      }
    ]
  }
}]

output alertNames array = [for (r, i) in rules: alerts[i].name]
