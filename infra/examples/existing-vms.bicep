// se-forwarder onto VMs and scale sets that already exist, through the Custom Script extension
// (infra/modules/vm-agent.bicep), wired to the outputs of an earlier main.bicep deployment.
// The VMs need the fleet identity attached (or a system-assigned identity listed in
// main.bicep's agentPrincipalIds), and that identity needs Storage Blob Data Reader on the
// container holding install.sh. See docs/install.md.
//
//   az deployment group create -g <rg> -f infra/examples/existing-vms.bicep \
//     -p mainDeploymentName=<name of the main.bicep deployment> vmNames='["vm1","vm2"]' \
//        installerUri=https://<account>.blob.core.windows.net/se-forwarder/install.sh packageVersion=0.1.0

targetScope = 'resourceGroup'

@description('Name of the deployment of infra/main.bicep in this resource group.')
param mainDeploymentName string

@description('Existing Linux VMs in this resource group.')
param vmNames array = []

@description('Existing Linux scale sets in this resource group.')
param scaleSetNames array = []

@description('Existing Windows VMs in this resource group (install.ps1 at windowsInstallerUri).')
param windowsVmNames array = []

@description('URL of install.sh (a storage blob, fetched with the VM identity).')
param installerUri string

@description('URL of install.ps1, for windowsVmNames.')
param windowsInstallerUri string = ''

@description('Pinned se-forwarder version from the package index; or give packageUri.')
param packageVersion string = ''

@description('URL of a se-forwarder wheel instead of a version from the package index (secure: it may carry a SAS).')
@secure()
param packageUri string = ''

// The outputs of the main.bicep deployment (logsIngestionEndpoint, dcrImmutableId, ...).
var logs = reference(resourceId('Microsoft.Resources/deployments', mainDeploymentName), '2022-09-01').outputs

module linuxAgents '../modules/vm-agent.bicep' = {
  name: 'se-forwarder-agents-linux'
  params: {
    osType: 'Linux'
    vmNames: vmNames
    scaleSetNames: scaleSetNames
    installerUri: installerUri
    fileFetchIdentityClientId: logs.identityClientId.value
    packageVersion: packageVersion
    packageUri: packageUri
    logsIngestionEndpoint: logs.logsIngestionEndpoint.value
    dcrImmutableId: logs.dcrImmutableId.value
    recordsStream: logs.recordsStream.value
    heartbeatsStream: logs.heartbeatsStream.value
    agentIdentityClientId: logs.identityClientId.value
  }
}

module windowsAgents '../modules/vm-agent.bicep' = if (!empty(windowsVmNames)) {
  name: 'se-forwarder-agents-windows'
  params: {
    osType: 'Windows'
    vmNames: windowsVmNames
    installerUri: windowsInstallerUri
    fileFetchIdentityClientId: logs.identityClientId.value
    packageVersion: packageVersion
    packageUri: packageUri
    logsIngestionEndpoint: logs.logsIngestionEndpoint.value
    dcrImmutableId: logs.dcrImmutableId.value
    recordsStream: logs.recordsStream.value
    heartbeatsStream: logs.heartbeatsStream.value
    agentIdentityClientId: logs.identityClientId.value
  }
}
