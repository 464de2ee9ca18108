// se-forwarder on existing VMs and scale sets, through the Custom Script extension.
//
// Linux:   Microsoft.Azure.Extensions / CustomScript 2.1 runs infra/scripts/install.sh
// Windows: Microsoft.Compute / CustomScriptExtension 1.10 runs infra/scripts/install.ps1
//
// The command goes in protectedSettings (encrypted, not shown in the instance view): apart from
// endpoints and ids it may carry packageUri, which can be a SAS URL (a secure parameter). The agent
// itself authenticates with the VM's managed identity. The installer
// is downloaded from installerUri; when that is a blob in a storage account, the extension
// fetches it with the VM's managed identity (grant it Storage Blob Data Reader on the container):
// fileFetchIdentityClientId empty = system-assigned identity, a client id = that user-assigned one.
//
// Scale sets: an extension on a scale set is part of its model (virtualMachineProfile.
// extensionProfile). Existing scale sets named in scaleSetNames get it as a child resource; new
// scale sets take the `extensionProfileEntry` output (the public half: no protectedSettings, since
// deployment outputs are stored in plain text in the deployment history) and add their own
// protectedSettings (see infra/examples/scale-set.bicep).
// With upgradePolicy Manual, existing instances get it at their next model upgrade.
//
// Rerunning with another packageVersion/packageUri (or forceUpdateTag) upgrades in place.

targetScope = 'resourceGroup'

@description('Names of existing VMs in this resource group to install the agent on.')
param vmNames array = []

@description('Names of existing scale sets in this resource group to add the extension to.')
param scaleSetNames array = []

@description('Operating system of the targets (one module deployment per OS).')
@allowed([
  'Linux'
  'Windows'
])
param osType string = 'Linux'

@description('URL of install.sh (Linux) or install.ps1 (Windows), e.g. a blob in a storage account.')
param installerUri string

@description('Fetch installerUri with the VM managed identity (a storage blob). False for public URLs.')
param fetchWithManagedIdentity bool = true

@description('Client id of the user-assigned identity that fetches the installer; empty = system-assigned.')
param fileFetchIdentityClientId string = ''

@description('Pinned se-forwarder version from the package index (or give packageUri).')
param packageVersion string = ''

@description('URL of a se-forwarder wheel instead of a version from the package index (secure: it may be a blob URL with a SAS token).')
@secure()
param packageUri string = ''

@description('Logs-ingestion endpoint (main.bicep output logsIngestionEndpoint).')
param logsIngestionEndpoint string

@description('Immutable id of the Data Collection Rule (main.bicep output dcrImmutableId).')
param dcrImmutableId string

@description('Stream of the lifecycle records (main.bicep output recordsStream).')
param recordsStream string = 'Custom-ScheduledEvents'

@description('Stream of the heartbeats (main.bicep output heartbeatsStream).')
param heartbeatsStream string = 'Custom-ScheduledEventsAgent'

@description('Client id of the user-assigned identity the agent uses (main.bicep output identityClientId); empty = system-assigned.')
param agentIdentityClientId string = ''

@description('Change to force the extension to run again with unchanged settings.')
param forceUpdateTag string = ''

@description('Extension name on the VMs / scale sets.')
param extensionName string = 'se-forwarder'

var isLinux = osType == 'Linux'
var usePackageUri = !empty(packageUri)
var installerFile = last(split(split(installerUri, '?')[0], '/'))

// Linux: bash install.sh --version V --logs-endpoint ... ; values are single-quoted for the shell.
var linuxCommand = format('bash {0} {1} \'{2}\' --logs-endpoint \'{3}\' --dcr-id \'{4}\' --records-stream \'{5}\' --heartbeats-stream \'{6}\' --client-id \'{7}\'', installerFile, usePackageUri ? '--package' : '--version', usePackageUri ? packageUri : packageVersion, logsIngestionEndpoint, dcrImmutableId, recordsStream, heartbeatsStream, agentIdentityClientId)

// Windows: powershell -File install.ps1 -Version V -LogsEndpoint ... Windows PowerShell 5.1 drops an
// empty quoted argument ("") given through -File, so -ClientId "" would swallow nothing and fail:
// -ClientId is left out entirely for the system-assigned identity.
var windowsClientIdArgument = empty(agentIdentityClientId) ? '' : format(' -ClientId "{0}"', agentIdentityClientId)
var windowsCommand = format('powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -File {0} {1} "{2}" -LogsEndpoint "{3}" -DcrId "{4}" -RecordsStream "{5}" -HeartbeatsStream "{6}"{7}', installerFile, usePackageUri ? '-Package' : '-Version', usePackageUri ? packageUri : packageVersion, logsIngestionEndpoint, dcrImmutableId, recordsStream, heartbeatsStream, windowsClientIdArgument)

var fetchIdentity = empty(fileFetchIdentityClientId) ? {} : {
  clientId: fileFetchIdentityClientId
}

var protectedBase = {
  commandToExecute: isLinux ? linuxCommand : windowsCommand
  fileUris: [
    installerUri
  ]
}

var protectedSettings = fetchWithManagedIdentity ? union(protectedBase, {
  managedIdentity: fetchIdentity
}) : protectedBase

// The public half of the extension: what the extensionProfileEntry output may carry.
var extensionProperties = {
  publisher: isLinux ? 'Microsoft.Azure.Extensions' : 'Microsoft.Compute'
  type: isLinux ? 'CustomScript' : 'CustomScriptExtension'
  typeHandlerVersion: isLinux ? '2.1' : '1.10'
  autoUpgradeMinorVersion: true
  forceUpdateTag: forceUpdateTag
  settings: {}
}

resource vms 'Microsoft.Compute/virtualMachines@2024-11-01' existing = [for name in vmNames: {
  name: name
}]

resource vmExtensions 'Microsoft.Compute/virtualMachines/extensions@2024-11-01' = [for (name, i) in vmNames: {
  parent: vms[i]
  name: extensionName
  location: vms[i].location
  properties: {
    publisher: extensionProperties.publisher
    type: extensionProperties.type
    typeHandlerVersion: extensionProperties.typeHandlerVersion
    autoUpgradeMinorVersion: true
    forceUpdateTag: forceUpdateTag
    settings: {}
    protectedSettings: protectedSettings
  }
}]

resource scaleSets 'Microsoft.Compute/virtualMachineScaleSets@2024-11-01' existing = [for name in scaleSetNames: {
  name: name
}]

resource scaleSetExtensions 'Microsoft.Compute/virtualMachineScaleSets/extensions@2024-11-01' = [for (name, i) in scaleSetNames: {
  parent: scaleSets[i]
  name: extensionName
  properties: {
    publisher: extensionProperties.publisher
    type: extensionProperties.type
    typeHandlerVersion: extensionProperties.typeHandlerVersion
    autoUpgradeMinorVersion: true
    forceUpdateTag: forceUpdateTag
    settings: {}
    protectedSettings: protectedSettings
  }
}]

@description('The public half of the extension for a new scale set\'s virtualMachineProfile.extensionProfile.extensions: add protectedSettings (commandToExecute, fileUris, managedIdentity) in the scale set\'s template. Outputs are kept in plain text in the deployment history, so no protectedSettings here.')
output extensionProfileEntry object = {
  name: extensionName
  properties: extensionProperties
}

@description('Names of the VMs that got the extension.')
output vmExtensionIds array = [for (name, i) in vmNames: vmExtensions[i].id]
