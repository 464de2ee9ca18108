// The copy-paste starting point, stage 2: the Log Analytics side (infra/main.bicep: Data
// Collection Rule, fleet identity with Monitoring Metrics Publisher, workbooks, alerts) and a
// small scale set whose instances install and start se-forwarder through the Custom Script
// extension in its model (upgraded in place later: deploy again, then az vmss update-instances),
// wired to it. Stage 1 (infra/tables.bicep: the workspace and the tables) runs first,
// as a deployment of its own, so that the rule never meets a table Azure does not show it yet.
// See docs/install.md.
//
//   az deployment group create -g <rg> -n se-forwarder-tables -f infra/tables.bicep
//   az deployment group create -g <rg> -f infra/examples/scale-set-with-log-analytics.bicep \
//     -p workspaceResourceId="$(az deployment group show -g <rg> -n se-forwarder-tables \
//          --query properties.outputs.workspaceResourceId.value -o tsv)" \
//        subnetId=<subnet resource id> sshPublicKey="$(cat ~/.ssh/id_ed25519.pub)" \
//        installerUri=https://<account>.blob.core.windows.net/se-forwarder/install.sh \
//        packageUri=https://<account>.blob.core.windows.net/se-forwarder/se-forwarder-0.1.0-bundle.tar.gz \
//        packageSha256="$(sha256sum dist/se-forwarder-0.1.0-bundle.tar.gz | cut -d' ' -f1)" \
//        instanceCount=2
//
// The fleet identity it creates must read that container: give it Storage Blob Data Reader there
// (the identityPrincipalId output). The instances retry the install for about 15 minutes while
// the download is refused, time to grant it; later deployments leave out instanceCount.

targetScope = 'resourceGroup'

import { fleetSettings, scheduledEventsOptions } from '../modules/shared.bicep'

@description('Prefix of every resource name.')
param namePrefix string = 'se-forwarder'

param location string = resourceGroup().location

@description('The workspaceResourceId output of infra/tables.bicep (stage 1).')
param workspaceResourceId string

@description('Resource id of an existing subnet for the instances (outbound HTTPS needed).')
param subnetId string

@description('SSH public key for the admin user.')
param sshPublicKey string

@description('https URL of install.sh in a blob container (no SAS).')
param installerUri string

@description('https URL of the se-forwarder offline bundle (.tar.gz) or wheel, beside it.')
param packageUri string

@description('sha256 of that file (sha256sum): the instances install no other. Empty only to trust the container alone.')
param packageSha256 string

@description('https URL of the wheel\'s dependency lock; empty with a bundle.')
param lockUri string = ''

@description('Instances, for the first deployment; leave it out later to keep the current count.')
@minValue(1)
param instanceCount int?

@description('extension (in-place upgrades) or cloudInit (first boot only): see scale-set.bicep.')
@allowed([
  'cloudInit'
  'extension'
])
param installWith string = 'extension'

@description('Uniform or Flexible (scale-set.bicep): Flexible instances are ordinary VMs, upgraded through a Run Command each (instanceNames).')
@allowed([
  'Uniform'
  'Flexible'
])
param orchestrationMode string = 'Uniform'

@description('Flexible only: the existing instances to upgrade in this deployment (scale-set.bicep instanceNames).')
param instanceNames array = []

@description('Opt-in Scheduled Events policy of the scale set (see infra/README.md).')
param scheduledEvents scheduledEventsOptions = {
  publishToEventGridAndResourceGraph: false
  userInitiatedReboot: 'azureDefault'
  userInitiatedRedeploy: 'azureDefault'
}

@description('One place to configure the fleet: agent.tags, the policy and the webhook format, for every instance of the scale set in this one deployment (infra/modules/shared.bicep fleetSettings). The tag values are the scale set\'s own tags (param tags), which its instances carry.')
param fleet fleetSettings = {
  tags: []
  policyPreset: 'observe'
  policyRules: []
  webhookFormat: 'json'
}

@description('Webhook URL for notifications: a secret, carried only by the extension\'s protected settings (installWith=extension; customData is not protected, so cloud-init refuses it); empty: no webhook.')
@secure()
param webhookUrl string = ''

@description('Azure tags of the scale set (its instances carry them): the values of the tags fleet.tags names, e.g. {service: \'checkout\'}.')
param scaleSetTags object = {}

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
    installerUri: installerUri
    packageUri: packageUri
    packageSha256: packageSha256
    lockUri: lockUri
    installWith: installWith
    scheduledEvents: scheduledEvents
    tags: scaleSetTags
    fleet: fleet
    orchestrationMode: orchestrationMode
    instanceNames: instanceNames
    webhookUrl: webhookUrl
  }
}

output scaleSetId string = scaleSet.outputs.scaleSetId
output logsIngestionEndpoint string = logs.outputs.logsIngestionEndpoint
output dcrImmutableId string = logs.outputs.dcrImmutableId
@description('Principal id of the fleet identity: give it Storage Blob Data Reader on the package container.')
output identityPrincipalId string = logs.outputs.identityPrincipalId
