// The custom tables of contract.json (records, heartbeats, platform), with exactly the contract's columns.
// Columns and types come from src/se_forwarder/contract.json (the one home of the column list);
// contract types are mapped to Log Analytics column types by the contract's own typeMap.table.
//
// A table's schema is replaced by every deployment (a PUT): a column removed from contract.json
// is deleted from the table with its data. The contract is append-only
// (tests/infra/test_contract_columns.py holds it to tests/infra/contract_columns.baseline.json).
// Deployed by infra/tables.bicep, a deployment of its own that runs before main.bicep: a Data
// Collection Rule created right after a brand-new table may not see it yet (InvalidOutputTable).

import { checkedTotalRetention } from 'shared.bicep'

@description('Name of the Log Analytics workspace (in this module\'s resource group).')
param workspaceName string

@description('Interactive (Analytics plan) retention of every table, in days.')
@minValue(4)
@maxValue(730)
param retentionInDays int = 90

@description('Total retention (interactive + long-term archive) of every table, in days: 4 to 730, or whole years (1095, 1460, 1826, 2191, 2556, 2922, 3288, 3653, 4018, 4383).')
@minValue(4)
@maxValue(4383)
param totalRetentionInDays int = 365

var contract = loadJsonContent('../../src/se_forwarder/contract.json')
var tableTypes = contract.typeMap.table

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' existing = {
  name: workspaceName
}

// One table per entry of contract.tables: records -> ScheduledEvents_CL, heartbeats -> ScheduledEventsAgent_CL.
resource tables 'Microsoft.OperationalInsights/workspaces/tables@2023-09-01' = [for t in items(contract.tables): {
  parent: workspace
  name: t.value.table
  properties: {
    plan: 'Analytics'
    retentionInDays: retentionInDays
    totalRetentionInDays: max(checkedTotalRetention(totalRetentionInDays), retentionInDays)
    schema: {
      name: t.value.table
      description: 'se-forwarder: Azure Scheduled Events ${t.key} (record-contract.md)'
      columns: map(t.value.columns, c => {
        name: c.name
        type: tableTypes[c.type]
        description: c.description
      })
    }
  }
}]

@description('Table names by contract key (records, heartbeats).')
output tableNames object = toObject(items(contract.tables), t => t.key, t => t.value.table)
