// One Linux VM running se-forwarder, installed by cloud-init at first boot (the same customData
// as infra/examples/scale-set.bicep), with the fleet identity attached and an opt-in Scheduled
// Events policy. The network interface is created with the VM (networkInterfaceConfigurations)
// in an existing subnet that allows outbound HTTPS (Azure Monitor, Azure Storage, the package
// index of the lock's dependencies). Values come from main.bicep's outputs.
//
//   az deployment group create -g <rg> -f infra/examples/vm.bicep -p name=se-vm1 \
//     subnetId=<subnet id> sshPublicKey="$(cat ~/.ssh/id_ed25519.pub)" \
//     identityResourceId=... identityClientId=... logsIngestionEndpoint=... dcrImmutableId=... \
//     packageUri=https://<account>.blob.core.windows.net/se-forwarder/se_forwarder-0.1.0-py3-none-any.whl \
//     lockUri=https://<account>.blob.core.windows.net/se-forwarder/se_forwarder-0.1.0.lock \
//     scheduledEvents='{"publishToEventGridAndResourceGraph": true, "userInitiatedReboot": "waitForApproval", "userInitiatedRedeploy": "azureDefault"}'

targetScope = 'resourceGroup'

import { cloudInit, plainUrl, scheduledEventsOptions } from '../modules/shared.bicep'

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

@description('https URL of the se-forwarder wheel in a blob container the identity can read (Storage Blob Data Reader; no SAS).')
param packageUri string

@description('https URL of its dependency lock (infra/scripts/lock-dependencies.py), beside it.')
param lockUri string

@description('Opt-in Scheduled Events policy (Compute API 2025-04-01): publish the events to Azure Resource Graph and Event Grid, and how user-initiated reboots and redeploys are approved (see shared.bicep and infra/README.md). The default leaves the VM as Azure makes it. A VM in an availability set or scale set takes its group\'s policy.')
param scheduledEvents scheduledEventsOptions = {
  publishToEventGridAndResourceGraph: false
  userInitiatedReboot: 'azureDefault'
  userInitiatedRedeploy: 'azureDefault'
}

param tags object = {}

var settings = {
  packageUri: plainUrl(packageUri, 'packageUri')
  lockUri: plainUrl(lockUri, 'lockUri')
  logsIngestionEndpoint: logsIngestionEndpoint
  dcrImmutableId: dcrImmutableId
  recordsStream: recordsStream
  heartbeatsStream: heartbeatsStream
  clientId: identityClientId
}
var customData = base64(cloudInit(loadTextContent('../cloud-init/se-forwarder.yaml'), loadFileAsBase64('../cloud-init/install.sh.gz'), settings))
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
      customData: customData
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
      // Debian 12 ships Python 3.11 (the agent needs 3.11+); Ubuntu 24.04 works too.
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

output vmId string = vm.id
