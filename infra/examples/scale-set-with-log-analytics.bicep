// The copy-paste starting point, stage 2: the Log Analytics side (infra/main.bicep: Data
// Collection Rule, fleet identity with Monitoring Metrics Publisher, workbooks, alerts) and a
// small scale set whose instances install and start se-forwarder at first boot through
// cloud-init, wired to it. Stage 1 (infra/tables.bicep: the workspace and the tables) runs first,
// as a deployment of its own, so that the rule never meets a table Azure does not show it yet.
// See docs/install.md.
//
//   az deployment group create -g <rg> -n se-forwarder-tables -f infra/tables.bicep
//   az deployment group create -g <rg> -f infra/examples/scale-set-with-log-analytics.bicep \
//     -p workspaceResourceId="$(az deployment group show -g <rg> -n se-forwarder-tables \
//          --query properties.outputs.workspaceResourceId.value -o tsv)" \
//        subnetId=<subnet resource id> sshPublicKey="$(cat ~/.ssh/id_ed25519.pub)" \
//        packageUri=https://<account>.blob.core.windows.net/se-forwarder/se_forwarder-0.1.0-py3-none-any.whl \
//        lockUri=https://<account>.blob.core.windows.net/se-forwarder/se_forwarder-0.1.0.lock
//
// The fleet identity it creates must read that container: give it Storage Blob Data Reader there
// (the identityPrincipalId output) before the instances boot, or scale out again afterwards.

targetScope = 'resourceGroup'

import { scheduledEventsOptions } from '../modules/shared.bicep'

@description('Prefix of every resource name.')
param namePrefix string = 'se-forwarder'

param location string = resourceGroup().location

@description('The workspaceResourceId output of infra/tables.bicep (stage 1).')
param workspaceResourceId string

@description('Resource id of an existing subnet for the instances (outbound HTTPS needed).')
param subnetId string

@description('SSH public key for the admin user.')
param sshPublicKey string

@description('https URL of the se-forwarder wheel in a blob container (no SAS).')
param packageUri string

@description('https URL of its dependency lock, beside it.')
param lockUri string

@minValue(1)
param instanceCount int = 2

@description('Opt-in Scheduled Events policy of the scale set (see infra/README.md).')
param scheduledEvents scheduledEventsOptions = {
  publishToEventGridAndResourceGraph: false
  userInitiatedReboot: 'azureDefault'
  userInitiatedRedeploy: 'azureDefault'
}

module logs '../main.bicep' = {
  name: '${namePrefix}-log-analytics'
  params: {
    namePrefix: namePrefix
    location: location
    workspaceResourceId: workspaceResourceId
    createFleetIdentity: true
  }
}

module scaleSet 'scale-set.bicep' = {
  name: '${namePrefix}-scale-set'
  params: {
    name: '${namePrefix}-vmss'
    location: location
    instanceCount: instanceCount
    subnetId: subnetId
    sshPublicKey: sshPublicKey
    identityResourceId: logs.outputs.identityResourceId
    identityClientId: logs.outputs.identityClientId
    logsIngestionEndpoint: logs.outputs.logsIngestionEndpoint
    dcrImmutableId: logs.outputs.dcrImmutableId
    recordsStream: logs.outputs.recordsStream
    heartbeatsStream: logs.outputs.heartbeatsStream
    packageUri: packageUri
    lockUri: lockUri
    installWith: 'cloudInit'
    scheduledEvents: scheduledEvents
  }
}

output scaleSetId string = scaleSet.outputs.scaleSetId
output logsIngestionEndpoint string = logs.outputs.logsIngestionEndpoint
output dcrImmutableId string = logs.outputs.dcrImmutableId
@description('Principal id of the fleet identity: give it Storage Blob Data Reader on the package container.')
output identityPrincipalId string = logs.outputs.identityPrincipalId
