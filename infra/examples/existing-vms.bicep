// se-forwarder onto VMs and scale sets that already exist (infra/modules/vm-agent.bicep: a Run
// Command on each VM, the Custom Script extension on each scale set), wired to the resources an
// earlier main.bicep deployment made, read as `existing` resources (not from its outputs).
//
// The identity the agents run as must be able to read the blob container holding the installer,
// the wheel and its lock (Storage Blob Data Reader): the fleet identity attached to the VMs
// (agentIdentity=fleet), or each VM's system-assigned identity (agentIdentity=systemAssigned, the
// identities listed in main.bicep's agentPrincipalIds or a group in agentGroupObjectIds).
// Pass running VMs only (a deallocated VM cannot take a run command). See docs/install.md.
//
//   az deployment group create -g <rg> -f infra/examples/existing-vms.bicep \
//     -p vmNames="$(az vm list -g <rg> -d --query "[?powerState=='VM running'].name" -o json)" \
//        installerUri=https://<account>.blob.core.windows.net/se-forwarder/install.sh \
//        packageUri=https://<account>.blob.core.windows.net/se-forwarder/se-forwarder-0.1.0-bundle.tar.gz \
//        packageSha256="$(sha256sum dist/se-forwarder-0.1.0-bundle.tar.gz | cut -d' ' -f1)"
//
// A Flexible scale set's instances are ordinary VMs: pass their names in vmNames (a Run Command
// each); its name in scaleSetNames changes only the model, which new instances take.
//
// Upgrades and configuration changes: deploy again with the new values (a changed run command
// runs again; forceUpdateTag reruns it unchanged). The nested deployments are named after this
// deployment, so concurrent deployments for other VMs (under other names) do not collide.

targetScope = 'resourceGroup'

import { fleetSettings } from '../modules/shared.bicep'

@description('namePrefix of the main.bicep deployment (its rule is <prefix>-dcr, its fleet identity <prefix>-agents).')
param namePrefix string = 'se-forwarder'

@description('Resource group of the main.bicep deployment (default: this one).')
param monitoringResourceGroup string = resourceGroup().name

@description('main.bicep was deployed with useDataCollectionEndpoint=true: the agents send to the endpoint <prefix>-dcr-dce, not to the rule\'s own.')
param useDataCollectionEndpoint bool = false

@description('The identity the agents (and the downloads) use: fleet = the user-assigned fleet identity <prefix>-agents (attached to the VMs); systemAssigned = each VM\'s own.')
@allowed([
  'fleet'
  'systemAssigned'
])
param agentIdentity string = 'fleet'

@description('Existing, running Linux VMs in this resource group.')
param vmNames array = []

@description('Existing Linux scale sets in this resource group.')
param scaleSetNames array = []

@description('Existing, running Windows VMs in this resource group (install.ps1 at windowsInstallerUri).')
param windowsVmNames array = []

@description('https URL of install.sh in the blob container (no SAS: read with the identity).')
param installerUri string

@description('https URL of the se-forwarder offline bundle (.tar.gz, Linux) or wheel in the container.')
param packageUri string

@description('sha256 of that file (sha256sum): the VMs install no other. Empty only to trust the container alone.')
param packageSha256 string

@description('https URL of the wheel\'s dependency lock (infra/scripts/lock-dependencies.py) in the container; empty with a bundle.')
param lockUri string = ''

@description('One place to configure the fleet: agent.tags, the policy and the webhook format, on every VM and scale set of this deployment (infra/modules/shared.bicep fleetSettings).')
param fleet fleetSettings = {
  tags: []
  policyPreset: 'observe'
  policyRules: []
  webhookFormat: 'json'
}

@description('Webhook URL for notifications: a secret, carried only by the Run Command\'s protected parameters and the extension\'s protected settings (Linux); empty: no webhook.')
@secure()
param webhookUrl string = ''

@description('Change to run the install again with unchanged settings.')
param forceUpdateTag string = ''

@description('https URL of install.ps1, for windowsVmNames.')
param windowsInstallerUri string = ''

@description('https URL of the se-forwarder wheel for windowsVmNames (a bundle is for Linux); default packageUri.')
param windowsPackageUri string = packageUri

@description('sha256 of windowsPackageUri; default packageSha256.')
param windowsPackageSha256 string = packageSha256

@description('https URL of a dependency lock made on Windows (with pywin32), for windowsVmNames.')
param windowsLockUri string = ''

var contract = loadJsonContent('../../src/se_forwarder/contract.json')
var dcrName = '${namePrefix}-dcr'

resource dcr 'Microsoft.Insights/dataCollectionRules@2023-03-11' existing = {
  name: dcrName
  scope: resourceGroup(monitoringResourceGroup)
}

resource dce 'Microsoft.Insights/dataCollectionEndpoints@2023-03-11' existing = if (useDataCollectionEndpoint) {
  name: '${dcrName}-dce'
  scope: resourceGroup(monitoringResourceGroup)
}

resource fleetIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' existing = if (agentIdentity == 'fleet') {
  name: '${namePrefix}-agents'
  scope: resourceGroup(monitoringResourceGroup)
}

var logsIngestionEndpoint = useDataCollectionEndpoint ? dce!.properties.logsIngestion.endpoint : dcr.properties.endpoints.logsIngestion
// empty: the installer and the agent use the VM's system-assigned identity
var clientId = agentIdentity == 'fleet' ? fleetIdentity!.properties.clientId : ''

module linuxAgents '../modules/vm-agent.bicep' = if (!empty(vmNames) || !empty(scaleSetNames)) {
  name: take('${deployment().name}-agents-linux', 64)
  params: {
    osType: 'Linux'
    vmNames: vmNames
    scaleSetNames: scaleSetNames
    installerUri: installerUri
    packageUri: packageUri
    packageSha256: packageSha256
    lockUri: lockUri
    forceUpdateTag: forceUpdateTag
    logsIngestionEndpoint: logsIngestionEndpoint
    dcrImmutableId: dcr.properties.immutableId
    recordsStream: contract.tables.records.stream
    heartbeatsStream: contract.tables.heartbeats.stream
    agentIdentityClientId: clientId
    fleet: fleet
    webhookUrl: webhookUrl
  }
}

module windowsAgents '../modules/vm-agent.bicep' = if (!empty(windowsVmNames)) {
  name: take('${deployment().name}-agents-windows', 64)
  params: {
    osType: 'Windows'
    vmNames: windowsVmNames
    installerUri: empty(windowsVmNames) || !empty(windowsInstallerUri) ? windowsInstallerUri : fail('windowsVmNames needs windowsInstallerUri (install.ps1 in the container).')
    packageUri: windowsPackageUri
    packageSha256: windowsPackageSha256
    forceUpdateTag: forceUpdateTag
    lockUri: empty(windowsVmNames) || !empty(windowsLockUri) ? windowsLockUri : fail('windowsVmNames needs windowsLockUri: a dependency lock made on Windows (lock-dependencies.py --also pywin32==<version>).')
    logsIngestionEndpoint: logsIngestionEndpoint
    dcrImmutableId: dcr.properties.immutableId
    recordsStream: contract.tables.records.stream
    heartbeatsStream: contract.tables.heartbeats.stream
    agentIdentityClientId: clientId
    fleet: fleet
  }
}
