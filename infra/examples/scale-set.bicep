// A small Linux scale set running se-forwarder, installed either by cloud-init at first boot
// (customData from infra/cloud-init/se-forwarder.yaml, the default) or by the Custom Script
// extension in the scale set's model. Both run infra/scripts/install.sh with the same settings
// (infra/modules/shared.bicep), downloading the wheel and its lock with the fleet identity.
//
// Deploy it through scale-set-with-log-analytics.bicep, or on its own with the outputs of a
// main.bicep deployment. The subnet must already exist (and allow outbound HTTPS to Azure Monitor,
// Azure Storage and the index the lock's dependencies come from).

targetScope = 'resourceGroup'

import { cloudInit, linuxInstallCommand, plainUrl, scheduledEventsOptions } from '../modules/shared.bicep'

@description('Scale set name (instances are named <name>_<n> in Scheduled Events).')
param name string

param location string = resourceGroup().location

@description('Number of instances.')
@minValue(1)
param instanceCount int = 2

param vmSize string = 'Standard_B2s'

@description('Resource id of an existing subnet for the instances.')
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

@description('cloudInit: customData installs the agent at first boot. extension: the Custom Script extension in the model does.')
@allowed([
  'cloudInit'
  'extension'
])
param installWith string = 'cloudInit'

@description('With installWith=extension: https URL of install.sh beside the wheel (read with the identity).')
param installerUri string = ''

@description('Opt-in Scheduled Events policy (Compute API 2025-04-01): publish the events to Azure Resource Graph and Event Grid, and how user-initiated reboots and redeploys are approved (see shared.bicep and infra/README.md). The default leaves the scale set as Azure makes it. Instances of a scale set cannot differ from it.')
param scheduledEvents scheduledEventsOptions = {
  publishToEventGridAndResourceGraph: false
  userInitiatedReboot: 'azureDefault'
  userInitiatedRedeploy: 'azureDefault'
}

param tags object = {}

var useCloudInit = installWith == 'cloudInit'
var settings = {
  packageUri: plainUrl(packageUri, 'packageUri')
  lockUri: plainUrl(lockUri, 'lockUri')
  logsIngestionEndpoint: logsIngestionEndpoint
  dcrImmutableId: dcrImmutableId
  recordsStream: recordsStream
  heartbeatsStream: heartbeatsStream
  clientId: identityClientId
}
// infra/cloud-init/se-forwarder.yaml with its placeholders filled; install.sh travels inside it,
// gzip-compressed (infra/cloud-init/install.sh.gz, written by infra/scripts/pack-installer.py).
var customData = useCloudInit ? base64(cloudInit(loadTextContent('../cloud-init/se-forwarder.yaml'), loadFileAsBase64('../cloud-init/install.sh.gz'), settings)) : null
var installer = useCloudInit ? '' : plainUrl(installerUri, 'installerUri')
var policyEnabled = scheduledEvents.publishToEventGridAndResourceGraph || scheduledEvents.userInitiatedReboot != 'azureDefault' || scheduledEvents.userInitiatedRedeploy != 'azureDefault'

resource scaleSet 'Microsoft.Compute/virtualMachineScaleSets@2025-04-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: vmSize
    tier: 'Standard'
    capacity: instanceCount
  }
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityResourceId}': {}
    }
  }
  properties: {
    orchestrationMode: 'Uniform'
    overprovision: false
    // Manual: a model change (a new agent version in the extension, new cloud-init) reaches the
    // instances when you run `az vmss update-instances` (or reimage), at your pace. Rolling would be
    // safer than Automatic but needs a load-balancer health probe or the Application Health
    // extension, which this small example does not have. Automatic would apply a model change (the
    // extension, a new version) to every instance at once, all restarting the agent together.
    upgradePolicy: {
      mode: 'Manual'
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
    virtualMachineProfile: {
      osProfile: {
        computerNamePrefix: take(name, 9)
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
          managedDisk: {
            storageAccountType: 'StandardSSD_LRS'
          }
        }
      }
      networkProfile: {
        networkInterfaceConfigurations: [
          {
            name: '${name}-nic'
            properties: {
              primary: true
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
      extensionProfile: useCloudInit ? null : {
        extensions: [
          {
            name: 'se-forwarder'
            properties: {
              publisher: 'Microsoft.Azure.Extensions'
              type: 'CustomScript'
              typeHandlerVersion: '2.1'
              autoUpgradeMinorVersion: true
              settings: {}
              protectedSettings: {
                commandToExecute: linuxInstallCommand(last(split(installer, '/')), settings)
                fileUris: [
                  installer
                ]
                managedIdentity: {
                  clientId: identityClientId
                }
              }
            }
          }
        ]
      }
      // Scale-in and deletion show up as Terminate events with 5 minutes of notice.
      scheduledEventsProfile: {
        terminateNotificationProfile: {
          enable: true
          notBeforeTimeout: 'PT5M'
        }
      }
    }
  }
}

output scaleSetId string = scaleSet.id
