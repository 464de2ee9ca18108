// Action group and the five log alert rules (scheduled query rules on the workspace).
// The rules that concern one VM are resource-centric: resourceIdColumn = VmResourceId, so the alert
// is raised on the VM itself. Their KQL lives in dashboards/queries/alerts/ (one home; analyzed by
// tests/test_kql.py against the contract's tables).

@description('Azure region of the rules (the workspace\'s region).')
param location string

@description('Resource id of the Log Analytics workspace the rules query.')
param workspaceResourceId string

@description('Prefix of the rule and action-group names.')
param namePrefix string = 'se-forwarder'

@description('Create the alert rules enabled.')
param enabled bool = true

@description('Email addresses notified by the action group.')
param alertEmails array = []

@description('Webhook URLs (e.g. a chat or paging integration) called by the action group, with the common alert schema.')
@secure()
param alertWebhookUrls object = {
  urls: []
}

@description('Alert 4: more than this many distinct VMs starting an event within 10 minutes.')
@minValue(1)
param manyVmsThreshold int = 5

param tags object = {}

var hasReceivers = !empty(alertEmails) || !empty(alertWebhookUrls.urls)

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = if (hasReceivers) {
  name: '${namePrefix}-ag'
  location: 'global'
  tags: tags
  properties: {
    groupShortName: take(replace(namePrefix, '-', ''), 12)
    enabled: true
    emailReceivers: [for (email, i) in alertEmails: {
      name: 'email-${i}'
      emailAddress: email
      useCommonAlertSchema: true
    }]
    webhookReceivers: [for (url, i) in alertWebhookUrls.urls: {
      name: 'webhook-${i}'
      serviceUri: url
      useCommonAlertSchema: true
    }]
  }
}

var actionGroupIds = hasReceivers ? [
  actionGroup.id
] : []

// The rules, as data: one home for their shape; the KQL is loaded from dashboards/queries/alerts/.
var rules = [
  {
    key: 'impactful-event-scheduled'
    displayName: 'Scheduled Events: impactful event scheduled for a VM'
    description: 'A Reboot, Redeploy, Preempt or Terminate event is scheduled for this VM. Dimensions: EventId, EventType, NotBefore (UTC) and NoticeMinutes (the countdown when the agent saw it). Resolves when the event starts or goes away.'
    severity: 2
    query: loadTextContent('../../dashboards/queries/alerts/impactful-event-scheduled.kql')
    resourceIdColumn: 'VmResourceId'
    dimensions: [
      'EventId'
      'EventType'
      'NotBefore'
      'NoticeMinutes'
    ]
    metricMeasureColumn: ''
    threshold: 0
    frequency: 'PT5M'
    windowSize: 'PT5M'
    overrideQueryTimeRange: 'P2D'
  }
  {
    key: 'started-without-notice'
    displayName: 'Scheduled Events: event started with no notice (hardware failure)'
    description: 'An event appeared already Started on this VM, with no Scheduled phase: the platform bypassed the notice, typically a host hardware failure.'
    severity: 1
    query: loadTextContent('../../dashboards/queries/alerts/started-without-notice.kql')
    resourceIdColumn: 'VmResourceId'
    dimensions: [
      'EventId'
      'EventType'
    ]
    metricMeasureColumn: ''
    threshold: 0
    frequency: 'PT5M'
    windowSize: 'PT15M'
    overrideQueryTimeRange: ''
  }
  {
    key: 'agent-silent'
    displayName: 'Scheduled Events: agent silent'
    description: 'The se-forwarder agent on this VM sent heartbeats in the last day but none for 15 minutes (and did not stop cleanly): events on this VM are not being recorded.'
    severity: 2
    query: loadTextContent('../../dashboards/queries/alerts/agent-silent.kql')
    resourceIdColumn: 'VmResourceId'
    dimensions: [
      'LastHeartbeat'
    ]
    metricMeasureColumn: ''
    threshold: 0
    frequency: 'PT5M'
    windowSize: 'PT15M'
    overrideQueryTimeRange: 'P1D'
  }
  {
    key: 'many-vms-hit'
    displayName: 'Scheduled Events: many VMs hit at once'
    description: 'More than ${manyVmsThreshold} distinct VMs started a scheduled event within 10 minutes (fleet-wide; counted by VmId).'
    severity: 1
    query: loadTextContent('../../dashboards/queries/alerts/many-vms-hit.kql')
    resourceIdColumn: ''
    dimensions: []
    metricMeasureColumn: 'VmsHit'
    threshold: manyVmsThreshold
    frequency: 'PT5M'
    windowSize: 'PT10M'
    overrideQueryTimeRange: ''
  }
  {
    key: 'delivery-trouble'
    displayName: 'Scheduled Events: agent delivery trouble'
    description: 'The agent on this VM reports a growing spool, failed deliveries, or dropped or dead-lettered records in its heartbeats: records may be late or lost.'
    severity: 3
    query: loadTextContent('../../dashboards/queries/alerts/delivery-trouble.kql')
    resourceIdColumn: 'VmResourceId'
    dimensions: []
    metricMeasureColumn: ''
    threshold: 0
    frequency: 'PT15M'
    windowSize: 'PT30M'
    overrideQueryTimeRange: ''
  }
]

resource alertRules 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = [for rule in rules: {
  name: '${namePrefix}-${rule.key}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: rule.displayName
    description: rule.description
    severity: rule.severity
    enabled: enabled
    scopes: [
      workspaceResourceId
    ]
    targetResourceTypes: [
      'Microsoft.OperationalInsights/workspaces'
    ]
    evaluationFrequency: rule.frequency
    windowSize: rule.windowSize
    overrideQueryTimeRange: empty(rule.overrideQueryTimeRange) ? null : rule.overrideQueryTimeRange
    criteria: {
      allOf: [
        {
          query: rule.query
          timeAggregation: empty(rule.metricMeasureColumn) ? 'Count' : 'Maximum'
          metricMeasureColumn: empty(rule.metricMeasureColumn) ? null : rule.metricMeasureColumn
          resourceIdColumn: empty(rule.resourceIdColumn) ? null : rule.resourceIdColumn
          dimensions: map(rule.dimensions, d => {
            name: d
            operator: 'Include'
            values: [
              '*'
            ]
          })
          operator: 'GreaterThan'
          threshold: rule.threshold
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: true
    actions: {
      actionGroups: actionGroupIds
      customProperties: {
        source: 'se-forwarder'
        rule: rule.key
      }
    }
  }
}]

output actionGroupId string = hasReceivers ? actionGroup.id : ''
output ruleNames array = [for (rule, i) in rules: alertRules[i].name]
