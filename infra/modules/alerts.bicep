// Action group and the log alert rules (scheduled query rules on the workspace): eight, or seven
// without the per-VM impactful-event rule (perVmImpactfulAlert=false).
// The rules that concern one VM are resource-centric: resourceIdColumn = VmResourceId, so the alert
// is raised on the VM itself. Their KQL lives in dashboards/queries/alerts/ (one home; analyzed by
// tests/infra/test_kql.py against the contract's tables).

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

@description('Webhook URLs (e.g. a chat or paging integration) called by the action group, with the common alert schema, as {"urls": [...]}. Secure only keeps them out of the deployment history: a key in a URL is still a key, so prefer alertSecureWebhooks.')
@secure()
param alertWebhookUrls object = {}

@description('Webhooks called with a Microsoft Entra token instead of a key in the URL (useAadAuth): [{"serviceUri": "https://...", "objectId": "<object id of the receiving app registration>", "identifierUri": "api://...", "tenantId": "<optional, default this tenant>"}].')
param alertSecureWebhooks array = []

@description('Create the rules without Azure validating their queries. Only for a first deployment whose tables are not queryable yet; otherwise false, so a query a log alert cannot run (an unknown column, ago() with a variable) fails the deployment instead of every evaluation.')
param skipQueryValidation bool = false

@description('Alert 4: more than this many distinct VMs starting an event within 10 minutes (any ten minutes; one alert per burst).')
@minValue(1)
param manyVmsThreshold int = 5

@description('Alert 4: event types not counted (by default Terminate and Preempt: scale-in, deletion and Spot eviction are expected churn).')
param manyVmsExcludedEventTypes array = [
  'Terminate'
  'Preempt'
]

@description('Alert 4: do not count events a user caused (EventSource "User": restarts, redeploys, scale-in through the API).')
param manyVmsExcludeUserEvents bool = true

@description('Alert 1 per VM: one alert per VM and EventId (on the VM itself). A log alert rule raises at most 300 stateful alerts per evaluation (beyond maxAlertsPerRule the rest fold into one alert on the workspace), and a fleet-wide update floods the receivers: fleets of more than a few hundred VMs should turn this off and rely on the fleet-level rule (one alert per EventId with the number of VMs hit).')
param perVmImpactfulAlert bool = true

@description('Concurrency risk: the tag that names a VM\'s service (one of the agents\' agent.tags); a VM without it belongs to its Kubernetes node pool, else its scale set, else its resource group.')
param serviceTag string = 'service'

@description('Concurrency risk: alert when at least this many VMs of one service may be impacted at the same time.')
@minValue(1)
param serviceRiskVms int = 5

@description('Concurrency risk: ...or at least this percentage of a service\'s VMs (and at least 2).')
@minValue(1)
@maxValue(100)
param serviceRiskPercent int = 50

@description('Concurrency risk: the alert\'s severity (0 critical to 4 verbose).')
@minValue(0)
@maxValue(4)
param serviceRiskSeverity int = 2

@description('Every rule: the most alerts one evaluation raises. Beyond it the rule folds the rest into one alert (dimensions "(more events)", "(more services)" or "(more VMs)", the latter raised on the workspace) with More, their number, and MoreOf, up to 20 of their names: Azure keeps at most 300 alerts per evaluation and drops the others unsaid.')
@minValue(2)
@maxValue(300)
param maxAlertsPerRule int = 250

param tags object = {}

var webhookUrls = contains(alertWebhookUrls, 'urls') ? alertWebhookUrls.urls : []
// Both kinds as one list: key-in-URL webhooks first (their receiver names stay webhook-0...),
// then the Entra-authenticated ones (tenantId defaults to this tenant).
var webhooks = concat(map(webhookUrls, url => {
  serviceUri: url
  useAadAuth: false
}), map(alertSecureWebhooks, hook => union({
  tenantId: tenant().tenantId
}, hook, {
  useAadAuth: true
})))
var hasReceivers = !empty(alertEmails) || !empty(webhookUrls) || !empty(alertSecureWebhooks)

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
    webhookReceivers: [for (hook, i) in webhooks: {
      name: 'webhook-${i}'
      serviceUri: hook.serviceUri
      useCommonAlertSchema: true
      useAadAuth: hook.useAadAuth
      objectId: hook.useAadAuth ? hook.objectId : null
      identifierUri: hook.useAadAuth ? hook.identifierUri : null
      tenantId: hook.useAadAuth ? hook.tenantId : null
    }]
  }
}

var actionGroupIds = hasReceivers ? [
  actionGroup!.id
] : []

// The rules, as data: one home for their shape; the KQL is loaded from dashboards/queries/alerts/.
var allRules = [
  {
    key: 'impactful-event-scheduled'
    displayName: 'Scheduled Events: impactful event scheduled for a VM'
    description: 'A Reboot, Redeploy, Preempt or Terminate event is scheduled for this VM. One alert per schedule. Dimensions: EventId, EventType, NotBefore (UTC); the result also gives NoticeMinutes (minutes from the first sighting on the VM to NotBefore). Resolves when the event starts or goes away.'
    severity: 2
    query: loadTextContent('../../dashboards/queries/alerts/impactful-event-scheduled.kql')
    resourceIdColumn: 'VmResourceId'
    dimensions: [
      'EventId'
      'EventType'
      'NotBefore'
    ]
    metricMeasureColumn: ''
    threshold: 0
    frequency: 'PT5M'
    windowSize: 'PT5M'
    overrideQueryTimeRange: 'P2D'
    autoMitigate: true
  }
  {
    key: 'impactful-event-unwatched'
    displayName: 'Scheduled Events: impactful event scheduled for VMs no agent watches (fleet, one alert per event)'
    description: 'Azure\'s own record (ScheduledEventsPlatform_CL, written by se-forwarder collect) has a Reboot, Redeploy, Preempt or Terminate event scheduled for VMs no agent on them is reporting (they run no agent, or their agent is silent). One alert per event, whatever the number of VMs, from 5 minutes after Azure\'s first row of it (an agent\'s record arriving meanwhile hands it to impactful-events-fleet). Dimensions: EventId, EventType; the result gives VmsUnwatched, NoAgent, NotBefore (UTC, the earliest), VmNames and VmResourceIds (up to 20, the inventory\'s ids). Leaves out the VMs impactful-events-fleet pages for (every VM of an event an agent reported, agent or not): the only alert for an event no agent reported, none for one an agent reported (one alert per incident); it still names a VM of such an event the fleet alert does not count (Azure still has it Scheduled 15 minutes after an agent\'s record of it started or removed arrived, NotBefore less than 30 minutes past), and never an event the fleet alert paged and let go. Resolves when Azure reports it started or ended, an hour after NotBefore, when agents report, or when the fleet alert takes the event over.'
    severity: 2
    query: loadTextContent('../../dashboards/queries/alerts/impactful-event-unwatched.kql')
    resourceIdColumn: ''
    dimensions: [
      'EventId'
      'EventType'
    ]
    metricMeasureColumn: 'VmsUnwatched'
    threshold: 0
    frequency: 'PT5M'
    windowSize: 'PT5M'
    overrideQueryTimeRange: 'P2D'
    autoMitigate: true
  }
  {
    key: 'impactful-events-fleet'
    displayName: 'Scheduled Events: impactful event scheduled (fleet, one alert per event)'
    description: 'A Reboot, Redeploy, Preempt or Terminate event is scheduled. One alert per EventId, whatever the number of VMs it hits and however often it is rescheduled. VmsHit counts every VM the event is still scheduled for, agent or not: the VMs whose agents report it and the VMs only Azure\'s own record names (ScheduledEventsPlatform_CL, written by se-forwarder collect), one per subscription/resource group/name. Fires for an event at least one agent reported as affecting its VM; an event naming only VMs with no agent (Azure\'s record alone) is paged by impactful-event-unwatched alone, and an event hitting VMs with an agent and without by this rule alone, naming all of them (one alert per incident). Dimensions: EventId, EventType; the result also gives VmNames (up to 20) and NotBefore (UTC, the latest known). Resolves when the event starts or goes away, or an hour after NotBefore.'
    severity: 2
    query: loadTextContent('../../dashboards/queries/alerts/impactful-events-fleet.kql')
    resourceIdColumn: ''
    dimensions: [
      'EventId'
      'EventType'
    ]
    metricMeasureColumn: 'VmsHit'
    threshold: 0
    frequency: 'PT5M'
    windowSize: 'PT5M'
    overrideQueryTimeRange: 'P2D'
    autoMitigate: true
  }
  {
    key: 'started-without-notice'
    displayName: 'Scheduled Events: event started with no notice (hardware failure)'
    description: 'An event appeared already Started on this VM, with no Scheduled phase, within 10 s of the previous poll: the platform bypassed the notice, typically a host hardware failure. Selected by ingestion time over a 2-day range: the record often arrives only after the VM is back.'
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
    // records ingested in the last 15 minutes (ingestion_time() in the query), whatever their
    // TimeGenerated within 2 days (the longest range a log alert may query; Log Analytics keeps a
    // TimeGenerated up to 2 days old, so a record spooled through a longer outage is stamped with
    // its ingestion time and still falls inside)
    overrideQueryTimeRange: 'P2D'
    autoMitigate: true
  }
  {
    key: 'agent-silent'
    displayName: 'Scheduled Events: agent silent'
    description: 'The se-forwarder agent on this VM sent heartbeats in the last 2 days but none for 15 minutes (a clean stop counts as silent after an hour: a reboot or an upgrade that never came back), and the VM was not deleted or evicted by a Terminate or Preempt event: events on this VM are not being recorded. Stays fired while the VM is silent, up to 2 days (the longest range a log alert can query); longer silences are in the agent-health workbook.'
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
    // 2 days, the maximum for a log alert: a VM silent for more than a day stays in the result, so
    // the alert does not resolve by itself after 24 hours but when the agent reports again (or
    // after 2 days). Stateless (autoMitigate false) would not resolve at all, but would raise a new
    // alert for every silent VM at every evaluation (every 5 minutes).
    overrideQueryTimeRange: 'P2D'
    autoMitigate: true
  }
  {
    key: 'many-vms-hit'
    displayName: 'Scheduled Events: many VMs hit at once'
    description: 'More than ${manyVmsThreshold} distinct VMs started a scheduled event within 10 minutes (fleet-wide; counted by VmId; not counted: ${empty(manyVmsExcludedEventTypes) ? 'no event type' : join(manyVmsExcludedEventTypes, ', ')}${manyVmsExcludeUserEvents ? ', events caused by a user' : ''}).'
    severity: 1
    query: loadTextContent('../../dashboards/queries/alerts/many-vms-hit.kql')
    resourceIdColumn: ''
    dimensions: []
    metricMeasureColumn: 'VmsHit'
    threshold: manyVmsThreshold
    frequency: 'PT5M'
    windowSize: 'PT10M'
    // Started records ingested in the last 10 minutes (ingestion_time()), compared with every
    // start of the last day
    overrideQueryTimeRange: 'P1D'
    autoMitigate: true
  }
  {
    key: 'delivery-trouble'
    displayName: 'Scheduled Events: agent delivery trouble'
    description: 'The agent on this VM reports a growing spool, failed deliveries, or dropped or dead-lettered records in the heartbeats that arrived in the last 30 minutes (also those spooled through an outage, which arrive late): records may be late or lost.'
    severity: 3
    query: loadTextContent('../../dashboards/queries/alerts/delivery-trouble.kql')
    resourceIdColumn: 'VmResourceId'
    dimensions: []
    metricMeasureColumn: ''
    threshold: 0
    frequency: 'PT15M'
    windowSize: 'PT30M'
    overrideQueryTimeRange: 'P2D'
    autoMitigate: true
  }
  {
    key: 'service-concurrency-risk'
    displayName: 'Scheduled Events: many VMs of one service impacted at once'
    description: 'At least ${serviceRiskVms} VMs, or ${serviceRiskPercent}% of the VMs (at least 2), of one service (tag ${serviceTag}, else scale set, else resource group) may be impacted at the same time by open events, from their NotBefore and duration (unknown durations count as the type\'s typical impact). One alert per service (dimension Service) while the risk lasts; the result gives VmsAtOnce, ServiceVms, At and the VMs. Resolves when the risk passes.'
    severity: serviceRiskSeverity
    query: loadTextContent('../../dashboards/queries/alerts/service-concurrency-risk.kql')
    resourceIdColumn: ''
    dimensions: [
      'Service'
    ]
    metricMeasureColumn: 'VmsAtOnce'
    threshold: 0
    frequency: 'PT5M'
    windowSize: 'PT5M'
    overrideQueryTimeRange: 'P2D'
    autoMitigate: true
  }
]

var rules = filter(allRules, r => r.key != 'impactful-event-scheduled' || perVmImpactfulAlert)

// Alert 4's exclusions: the query's defaults, replaced by the parameters' values (tests check that
// these exact texts are in many-vms-hit.kql, so a reworded query cannot silently ignore them).
var excludedTypesDefault = 'let excludedEventTypes = dynamic(["Terminate", "Preempt"]);'
var excludedTypesValue = 'let excludedEventTypes = dynamic(${string(manyVmsExcludedEventTypes)});'
var excludeUserDefault = 'let excludeUserEvents = true;'
var excludeUserValue = 'let excludeUserEvents = ${manyVmsExcludeUserEvents ? 'true' : 'false'};'
// the query reports a burst only when it crosses the rule's threshold (one alert per burst)
var thresholdDefault = 'let threshold = 5;'
var thresholdValue = 'let threshold = ${manyVmsThreshold};'
// the concurrency-risk rule's parameters (tests check these exact texts are in its query)
var riskDefaults = [
  'let riskVms = 5;'
  'let riskPercent = 50;'
  'let serviceTag = "service";'
]
var riskValues = [
  'let riskVms = ${serviceRiskVms};'
  'let riskPercent = ${serviceRiskPercent};'
  'let serviceTag = "${replace(serviceTag, '"', '')}";'
]

// Every rule's cap (dashboards/definitions/alert-cap.kql) and the resource its row beyond the cap is
// raised on (tests check these exact texts are in the queries that cap)
var capDefaults = [
  'let MaxAlerts = 250;'
  'let alertWorkspace = "";'
]
var capValues = [
  'let MaxAlerts = ${maxAlertsPerRule};'
  'let alertWorkspace = "${workspaceResourceId}";'
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
          query: replace(replace(replace(replace(replace(replace(replace(replace(rule.query, excludedTypesDefault, excludedTypesValue), excludeUserDefault, excludeUserValue), thresholdDefault, thresholdValue), riskDefaults[0], riskValues[0]), riskDefaults[1], riskValues[1]), riskDefaults[2], riskValues[2]), capDefaults[0], capValues[0]), capDefaults[1], capValues[1])
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
    autoMitigate: rule.autoMitigate
    // Validated by Azure unless a first deployment needs otherwise (the tables stage runs before
    // this one, so they normally exist and are queryable by now).
    skipQueryValidation: skipQueryValidation
    actions: {
      actionGroups: actionGroupIds
      customProperties: {
        source: 'se-forwarder'
        rule: rule.key
      }
    }
  }
}]

output actionGroupId string = hasReceivers ? actionGroup!.id : ''
output ruleNames array = [for (rule, i) in rules: alertRules[i].name]
