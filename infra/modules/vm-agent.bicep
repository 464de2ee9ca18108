// se-forwarder on existing VMs (managed Run Command) and scale sets (Custom Script extension in
// the model). Linux runs infra/scripts/install.sh, Windows infra/scripts/install.ps1.
//
// VMs: Microsoft.Compute/virtualMachines/runCommands, not the Custom Script extension. A VM holds
// one Custom Script extension at most, so a VM that already has one under another name could not
// take ours; it holds any number of run commands. The script is downloaded from installerUri with
// the VM's managed identity (scriptUriManagedIdentity), and the values reach it as Run Command
// parameters (see shared.bicep). A failed install fails the deployment
// (treatFailureAsDeploymentFailure) with the installer's message in the run command's instance
// view (`az vm run-command show --instance-view`).
// A run command, like any extension, runs through the VM agent: a deallocated (or stopped) VM
// cannot take it and fails its own run command while the others proceed. Pass running VMs only:
//   az vm list -g <rg> -d --query "[?powerState=='VM running'].name" -o json
// and run the deployment again for the others once they are started.
//
// Upgrades and configuration changes: deploy again with the new values. A changed run command
// runs install.sh again on each VM, which upgrades in place and keeps the state directory (the
// spool); forceUpdateTag reruns it unchanged.
//
// Scale sets: an extension on a scale set is part of its model (a run command is not), so scale
// sets in scaleSetNames get the Custom Script extension as a child resource. A scale set holds one
// Custom Script extension at most: one that already has another cannot take this one (merge the
// command into yours, or install through cloud-init, infra/examples/scale-set.bicep). With
// upgradePolicy Manual, instances get it, and every later change of it, at their next model
// update (`az vmss update-instances`, no reimage: the spool is kept); with Automatic, Azure
// applies it to every instance at once; deallocated instances take it when they start.
//
// The fleet settings (fleet: agent.tags, the policy) reach every VM and scale set from here; the
// one secret, webhookUrl, travels only in the Run Command's protectedParameters and the
// extension's protectedSettings.
//
// Nothing else here is secret: the package and its lock are downloaded by the installer with the VM's
// managed identity (Storage Blob Data Reader on the container), so no URL carries a SAS, and the
// agent authenticates with the same identity.

targetScope = 'resourceGroup'

import { checkedFleet, checkedPackage, checkedWebhook, fleetProtectedParameters, fleetRunCommandParameters, fleetSettings, isBundle, linuxFleetInstallCommand, linuxRunCommandParameters, plainUrl, windowsFleetInstallCommand, windowsFleetParameters, windowsRunCommandParameters } from 'shared.bicep'

@description('Names of existing, running VMs in this resource group to install the agent on.')
param vmNames array = []

@description('Names of existing scale sets in this resource group to add the extension to.')
param scaleSetNames array = []

@description('Operating system of the targets (one module deployment per OS).')
@allowed([
  'Linux'
  'Windows'
])
param osType string = 'Linux'

@description('https URL of install.sh (Linux) or install.ps1 (Windows) in a blob container the identity can read (no SAS).')
param installerUri string

@description('https URL of the se-forwarder offline bundle (.tar.gz, Linux) or wheel, beside it (no SAS).')
param packageUri string

@description('sha256 of that file: the installer refuses any other. Empty: the container is the only trust anchor.')
param packageSha256 string

@description('https URL of the wheel\'s dependency lock (infra/scripts/lock-dependencies.py; on Windows one made on Windows), beside it (no SAS); empty with a bundle.')
param lockUri string = ''

@description('Logs-ingestion endpoint (main.bicep output logsIngestionEndpoint).')
param logsIngestionEndpoint string

@description('Immutable id of the Data Collection Rule (main.bicep output dcrImmutableId).')
param dcrImmutableId string

@description('Stream of the lifecycle records (main.bicep output recordsStream).')
param recordsStream string = 'Custom-ScheduledEvents'

@description('Stream of the heartbeats (main.bicep output heartbeatsStream).')
param heartbeatsStream string = 'Custom-ScheduledEventsAgent'

@description('Client id of the user-assigned identity the agent and the downloads use (main.bicep output identityClientId); empty = the system-assigned identity.')
param agentIdentityClientId string = ''

@description('One place to configure the fleet: agent.tags, the policy and the webhook format, on every VM and scale set here (shared.bicep fleetSettings).')
param fleet fleetSettings = {
  tags: []
  policyPreset: 'observe'
  policyRules: []
  webhookFormat: 'json'
}

@description('Webhook URL for notifications (a secret: the Run Command\'s protected parameter and the extension\'s protected command carry it; stored on each VM as a root-only systemd credential). Linux only; empty: no webhook.')
@secure()
param webhookUrl string = ''

@description('Change to run the install again with unchanged settings (a new value changes the run command and the extension).')
param forceUpdateTag string = ''

@description('Run command name on the VMs.')
param runCommandName string = 'se-forwarder-install'

@description('Extension name on the scale sets.')
param extensionName string = 'se-forwarder'

var isLinux = osType == 'Linux'
var installer = !isLinux && isBundle(packageUri) ? fail('A bundle is for Linux: Windows installs a wheel with a lock made on Windows (install.ps1 -Lock).') : plainUrl(installerUri, 'installerUri')
var settings = union(checkedPackage(packageUri, packageSha256, lockUri), {
  logsIngestionEndpoint: logsIngestionEndpoint
  dcrImmutableId: dcrImmutableId
  recordsStream: recordsStream
  heartbeatsStream: heartbeatsStream
  clientId: agentIdentityClientId
})
var fleetChecked = checkedFleet(fleet)
var webhook = checkedWebhook(webhookUrl, isLinux)
// {} = the system-assigned identity, as the Run Command and the extension expect it
var fetchIdentity = empty(agentIdentityClientId) ? {} : {
  clientId: agentIdentityClientId
}
var installerFile = last(split(installer, '/'))

resource vms 'Microsoft.Compute/virtualMachines@2024-11-01' existing = [for name in vmNames: {
  name: name
}]

resource installs 'Microsoft.Compute/virtualMachines/runCommands@2024-11-01' = [for (name, i) in vmNames: {
  parent: vms[i]
  name: runCommandName
  location: vms[i].location
  properties: {
    source: {
      scriptUri: installer
      scriptUriManagedIdentity: fetchIdentity
    }
    parameters: isLinux ? concat(linuxRunCommandParameters(settings, forceUpdateTag), fleetRunCommandParameters(fleetChecked, !empty(webhook))) : concat(windowsRunCommandParameters(settings), windowsFleetParameters(fleetChecked), empty(forceUpdateTag) ? [] : [
      {
        name: 'RunId'
        value: forceUpdateTag
      }
    ])
    protectedParameters: fleetProtectedParameters(webhook)
    // the installer waits up to 3 minutes for a healthy agent; pip may take a few more
    timeoutInSeconds: 1800
    asyncExecution: false
    treatFailureAsDeploymentFailure: true
  }
}]

resource scaleSets 'Microsoft.Compute/virtualMachineScaleSets@2024-11-01' existing = [for name in scaleSetNames: {
  name: name
}]

resource scaleSetExtensions 'Microsoft.Compute/virtualMachineScaleSets/extensions@2024-11-01' = [for (name, i) in scaleSetNames: {
  parent: scaleSets[i]
  name: extensionName
  properties: {
    publisher: isLinux ? 'Microsoft.Azure.Extensions' : 'Microsoft.Compute'
    type: isLinux ? 'CustomScript' : 'CustomScriptExtension'
    typeHandlerVersion: isLinux ? '2.1' : '1.10'
    autoUpgradeMinorVersion: true
    forceUpdateTag: forceUpdateTag
    settings: {}
    protectedSettings: {
      commandToExecute: isLinux ? linuxFleetInstallCommand(installerFile, settings, fleetChecked, webhook) : windowsFleetInstallCommand(installerFile, settings, fleetChecked)
      fileUris: [
        installer
      ]
      managedIdentity: fetchIdentity
    }
  }
}]

@description('Resource ids of the run commands on the VMs.')
output runCommandIds array = [for (name, i) in vmNames: installs[i].id]
