// One Linux VM running se-forwarder, with the fleet identity attached and an opt-in Scheduled
// Events policy. The agent is installed, and later upgraded or reconfigured, by a managed Run
// Command (infra/modules/vm-agent.bicep): deploy again with another packageUri, DCR or endpoint
// and the run command runs install.sh again, in place (the spool in /var/lib/se-forwarder is kept).
// Nothing goes into customData: Azure refuses to change a VM's custom data after creation
// (PropertyChangeNotAllowed), so an installer there could never be upgraded by a deployment.
// The network interface is created with the VM (networkInterfaceConfigurations) in an existing
// subnet that allows outbound HTTPS (Azure Monitor, Azure Storage; with a wheel and its lock, the
// package index of the lock's dependencies; with a bundle, no index at all). Values come from
// main.bicep's outputs.
//
//   az deployment group create -g <rg> -f infra/examples/vm.bicep -p name=se-vm1 \
//     subnetId=<subnet id> sshPublicKey="$(cat ~/.ssh/id_ed25519.pub)" \
//     identityResourceId=... identityClientId=... logsIngestionEndpoint=... dcrImmutableId=... \
//     installerUri=https://<account>.blob.core.windows.net/se-forwarder/install.sh \
//     packageUri=https://<account>.blob.core.windows.net/se-forwarder/se-forwarder-0.1.0-bundle.tar.gz \
//     packageSha256="$(sha256sum dist/se-forwarder-0.1.0-bundle.tar.gz | cut -d' ' -f1)" \
//     scheduledEvents='{"publishToEventGridAndResourceGraph": true, "userInitiatedReboot": "waitForApproval", "userInitiatedRedeploy": "azureDefault"}'

targetScope = 'resourceGroup'

import { fleetSettings, scheduledEventsOptions } from '../modules/shared.bicep'

@description('VM name (the name in Scheduled Events\' Resources).')
param name string

param location string = resourceGroup().location

param vmSize string = 'Standard_B2s'

@description('Resource id of an existing subnet for the VM.')
param subnetId string

param adminUsername string = 'azureuser'

@description('SSH public key of adminUsername (password login is disabled).')
param sshPublicKey string

@description('Resource id of the user-assigned identity the agent uses (main.bicep output identityResourceId).')
param identityResourceId string

@description('Client id of that identity (main.bicep output identityClientId).')
param identityClientId string

@description('Logs-ingestion endpoint (main.bicep output logsIngestionEndpoint).')
param logsIngestionEndpoint string

@description('Immutable id of the Data Collection Rule (main.bicep output dcrImmutableId).')
param dcrImmutableId string

@description('Stream of the lifecycle records (main.bicep output recordsStream).')
param recordsStream string = 'Custom-ScheduledEvents'

@description('Stream of the heartbeats (main.bicep output heartbeatsStream).')
param heartbeatsStream string = 'Custom-ScheduledEventsAgent'

@description('https URL of install.sh in a blob container the identity can read (Storage Blob Data Reader; no SAS).')
param installerUri string

@description('https URL of the se-forwarder offline bundle (.tar.gz, infra/scripts/build-bundle.py) or wheel, beside it.')
param packageUri string

@description('sha256 of that file (sha256sum): the VM installs no other. Empty only to trust the container alone.')
param packageSha256 string

@description('https URL of the wheel\'s dependency lock (infra/scripts/lock-dependencies.py); empty with a bundle.')
param lockUri string = ''

@description('One place to configure the fleet: agent.tags, the policy and the webhook format (infra/modules/shared.bicep fleetSettings).')
param fleet fleetSettings = {
  tags: []
  policyPreset: 'observe'
  policyRules: []
  webhookFormat: 'json'
}

@description('Webhook URL for notifications: a secret, carried only by the Run Command\'s protected parameters (or the extension\'s protected settings); empty: no webhook.')
@secure()
param webhookUrl string = ''

@description('Change to run the install again with unchanged settings.')
param forceUpdateTag string = ''

@description('Opt-in Scheduled Events policy (Compute API 2025-04-01): publish the events to Azure Resource Graph and Event Grid, and how user-initiated reboots and redeploys are approved (see shared.bicep and infra/README.md). The default leaves the VM as Azure makes it. A VM in an availability set or scale set takes its group\'s policy.')
param scheduledEvents scheduledEventsOptions = {
  publishToEventGridAndResourceGraph: false
  userInitiatedReboot: 'azureDefault'
  userInitiatedRedeploy: 'azureDefault'
}

param tags object = {}

var policyEnabled = scheduledEvents.publishToEventGridAndResourceGraph || scheduledEvents.userInitiatedReboot != 'azureDefault' || scheduledEvents.userInitiatedRedeploy != 'azureDefault'

resource vm 'Microsoft.Compute/virtualMachines@2025-04-01' = {
  name: name
  location: location
  tags: tags
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityResourceId}': {}
    }
  }
  properties: {
    hardwareProfile: {
      vmSize: vmSize
    }
    // Opt-in (see scheduledEventsOptions in shared.bicep); left out unless a choice is made.
    scheduledEventsPolicy: !policyEnabled ? null : {
      scheduledEventsAdditionalPublishingTargets: !scheduledEvents.publishToEventGridAndResourceGraph ? null : {
        eventGridAndResourceGraph: {
          enable: true
          scheduledEventsApiVersion: '2020-07-01'
        }
      }
      userInitiatedReboot: scheduledEvents.userInitiatedReboot == 'azureDefault' ? null : {
        automaticallyApprove: scheduledEvents.userInitiatedReboot == 'automatic'
      }
      userInitiatedRedeploy: scheduledEvents.userInitiatedRedeploy == 'azureDefault' ? null : {
        automaticallyApprove: scheduledEvents.userInitiatedRedeploy == 'automatic'
      }
    }
    osProfile: {
      computerName: take(name, 64)
      adminUsername: adminUsername
      linuxConfiguration: {
        disablePasswordAuthentication: true
        ssh: {
          publicKeys: [
            {
              path: '/home/${adminUsername}/.ssh/authorized_keys'
              keyData: sshPublicKey
            }
          ]
        }
      }
    }
    storageProfile: {
      // Debian 12 (Python 3.11); Ubuntu 24.04 works too (3.12): the support matrix is in
      // docs/install.md. install.sh adds python3-venv when the image lacks it.
      imageReference: {
        publisher: 'Debian'
        offer: 'debian-12'
        sku: '12-gen2'
        version: 'latest'
      }
      osDisk: {
        createOption: 'FromImage'
        caching: 'ReadWrite'
        deleteOption: 'Delete'
        managedDisk: {
          storageAccountType: 'StandardSSD_LRS'
        }
      }
    }
    networkProfile: {
      networkApiVersion: '2022-11-01'
      networkInterfaceConfigurations: [
        {
          name: '${name}-nic'
          properties: {
            primary: true
            deleteOption: 'Delete'
            ipConfigurations: [
              {
                name: 'ipconfig1'
                properties: {
                  subnet: {
                    id: subnetId
                  }
                }
              }
            ]
          }
        }
      ]
    }
  }
}

// The install and every later change of it: a managed Run Command on this VM, run again whenever
// its parameters change (a new package, DCR, endpoint or forceUpdateTag). It checks the package.
module agent '../modules/vm-agent.bicep' = {
  name: take('${deployment().name}-agent-${name}', 64)
  params: {
    osType: 'Linux'
    vmNames: [
      vm.name
    ]
    installerUri: installerUri
    packageUri: packageUri
    packageSha256: packageSha256
    lockUri: lockUri
    logsIngestionEndpoint: logsIngestionEndpoint
    dcrImmutableId: dcrImmutableId
    recordsStream: recordsStream
    heartbeatsStream: heartbeatsStream
    agentIdentityClientId: identityClientId
    forceUpdateTag: forceUpdateTag
    fleet: fleet
    webhookUrl: webhookUrl
  }
}

output vmId string = vm.id
output runCommandIds array = agent.outputs.runCommandIds
