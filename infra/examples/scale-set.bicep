// A small Linux scale set running se-forwarder, installed by the Custom Script extension in the
// scale set's model (the default) or by cloud-init at first boot. Both run
// infra/scripts/install.sh with the same settings (infra/modules/shared.bicep), downloading the
// package (an offline bundle, or a wheel and its lock) with the fleet identity.
//
// Upgrades and configuration changes (installWith=extension): deploy again with the new values,
// then `az vmss update-instances --instance-ids '*'` (upgradePolicy Manual). The extension runs
// install.sh again on each instance, in place: the spool in /var/lib/se-forwarder is kept.
// installWith=cloudInit is first boot only: existing instances take a changed customData only
// when reimaged, and a reimage wipes the OS disk with the records not yet delivered (drain first:
// docs/install.md). Use it for fleets that roll out a version by replacing instances.
//
// Flexible orchestration (orchestrationMode=Flexible): each instance is an ordinary VM
// (Microsoft.Compute/virtualMachines/<name>, its own resource id, which the agent records as
// VmResourceId). The extension in the model installs new instances; a model change does not reach
// existing ones without `update-instances` (preview for Flexible), so an upgrade goes through each
// instance's own Run Command: list them in instanceNames (infra/modules/vm-agent.bicep, as
// existing-vms.bicep does), the same install.sh in place, the spool kept. docs/install.md,
// "Flexible scale sets".
//
// Deploy it through scale-set-with-log-analytics.bicep, or on its own with the outputs of a
// main.bicep deployment. The subnet must already exist (and allow outbound HTTPS to Azure Monitor,
// Azure Storage and, with a wheel and its lock, the index the lock's dependencies come from).

targetScope = 'resourceGroup'

import { checkedFleet, checkedPackage, checkedWebhook, cloudInit, fleetSettings, linuxFleetInstallCommand, plainUrl, scheduledEventsOptions } from '../modules/shared.bicep'

@description('Scale set name (instances are named <name>_<n> in Scheduled Events).')
param name string

@description('Uniform: instances with numeric ids, upgraded through the model (az vmss update-instances). Flexible: instances are ordinary VMs, upgraded through a Run Command each (instanceNames). Fixed at creation.')
@allowed([
  'Uniform'
  'Flexible'
])
param orchestrationMode string = 'Uniform'

@description('Flexible only: names of the existing instances to install or upgrade in this deployment, a Run Command each (running ones only: az vm list -g <rg> -d --query "[?virtualMachineScaleSet && powerState==\'VM running\'].name"). Empty on the first deployment: the extension in the model installs new instances.')
param instanceNames array = []

param location string = resourceGroup().location

@description('Number of instances, for the first deployment. Leave it out afterwards: the count is then left out of the request, so a re-deployment keeps what manual scaling or autoscale set.')
@minValue(1)
param instanceCount int?

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

@description('https URL of the se-forwarder offline bundle (.tar.gz, infra/scripts/build-bundle.py) or wheel in a blob container the identity can read (Storage Blob Data Reader; no SAS).')
param packageUri string

@description('sha256 of that file (sha256sum): the instances install no other. Empty only to trust the container alone.')
param packageSha256 string

@description('https URL of the wheel\'s dependency lock (infra/scripts/lock-dependencies.py), beside it; empty with a bundle.')
param lockUri string = ''

@description('extension: the Custom Script extension in the model installs the agent, and installs it again, in place, whenever it changes (a deployment, then az vmss update-instances). cloudInit: customData installs it at first boot only (a new version reaches existing instances only by reimage, which loses the spool).')
@allowed([
  'cloudInit'
  'extension'
])
param installWith string = 'extension'

@description('With installWith=extension: https URL of install.sh beside the package (read with the identity).')
param installerUri string = ''

@description('With installWith=extension: change to run the install again with unchanged settings (at the next update-instances).')
param forceUpdateTag string = ''

@description('Opt-in Scheduled Events policy (Compute API 2025-04-01): publish the events to Azure Resource Graph and Event Grid, and how user-initiated reboots and redeploys are approved (see shared.bicep and infra/README.md). The default leaves the scale set as Azure makes it. Instances of a scale set cannot differ from it.')
param scheduledEvents scheduledEventsOptions = {
  publishToEventGridAndResourceGraph: false
  userInitiatedReboot: 'azureDefault'
  userInitiatedRedeploy: 'azureDefault'
}

@description('Azure tags of the scale set; its instances carry them, and the agent records those named in fleet.tags.')
param tags object = {}

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


var useCloudInit = installWith == 'cloudInit'
var flexible = orchestrationMode == 'Flexible'
var upgradeNames = !flexible && !empty(instanceNames) ? fail('instanceNames is for orchestrationMode=Flexible: a Uniform scale set\'s instances take the model\'s extension by az vmss update-instances.') : instanceNames
var settings = union(checkedPackage(packageUri, packageSha256, lockUri), {
  logsIngestionEndpoint: logsIngestionEndpoint
  dcrImmutableId: dcrImmutableId
  recordsStream: recordsStream
  heartbeatsStream: heartbeatsStream
  clientId: identityClientId
})
// infra/cloud-init/se-forwarder.yaml with its placeholders filled; install.sh travels inside it,
// gzip-compressed (infra/cloud-init/install.sh.gz, written by infra/scripts/pack-installer.py).
// Each file is a variable of its own, a plain value in the compiled template: inside the
// customData expression they would count against ARM's 24,576 characters per expression
// (tests/infra/test_bicep_agent_install.py holds the budget).
var cloudInitTemplate = loadTextContent('../cloud-init/se-forwarder.yaml')
var installerGzBase64 = loadFileAsBase64('../cloud-init/install.sh.gz')
var fleetChecked = checkedFleet(fleet)
var webhook = useCloudInit && !empty(webhookUrl) ? fail('webhookUrl with installWith=cloudInit: customData is not a protected setting; install with the extension (installWith=extension) for a webhook.') : checkedWebhook(webhookUrl, true)
var customData = useCloudInit ? base64(cloudInit(cloudInitTemplate, installerGzBase64, settings, fleetChecked)) : null
var installer = useCloudInit ? '' : plainUrl(installerUri, 'installerUri')
var policyEnabled = scheduledEvents.publishToEventGridAndResourceGraph || scheduledEvents.userInitiatedReboot != 'azureDefault' || scheduledEvents.userInitiatedRedeploy != 'azureDefault'

resource scaleSet 'Microsoft.Compute/virtualMachineScaleSets@2025-04-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: vmSize
    tier: 'Standard'
    // null without instanceCount: left out of the request, the count stays what it is
    capacity: instanceCount
  }
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityResourceId}': {}
    }
  }
  properties: {
    orchestrationMode: orchestrationMode
    // Flexible: no overprovisioning (not supported) and a fault-domain count (required; 1 lets
    // Azure spread the instances as it can)
    overprovision: flexible ? null : false
    platformFaultDomainCount: flexible ? 1 : null
    // Manual: a model change (a new agent version in the extension) reaches the instances when
    // you run `az vmss update-instances`, at your pace, without a reimage (a changed customData
    // would need one). Rolling would be safer than Automatic but needs a load-balancer health
    // probe or the Application Health extension, which this small example does not have.
    // Automatic would apply a model change (the extension, a new version) to every instance at
    // once, all restarting the agent together.
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
        // required by Flexible: the instances' NICs are ordinary network interfaces
        networkApiVersion: flexible ? '2020-11-01' : null
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
              forceUpdateTag: forceUpdateTag
              settings: {}
              protectedSettings: {
                commandToExecute: linuxFleetInstallCommand(last(split(installer, '/')), settings, fleetChecked, webhook)
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

// Flexible: the existing instances, upgraded in place through a Run Command each (the same
// install.sh and settings as the model's extension; the instances' identity downloads the package)
module instanceUpgrades '../modules/vm-agent.bicep' = if (!empty(upgradeNames)) {
  name: take('${deployment().name}-instances-${name}', 64)
  dependsOn: [
    scaleSet
  ]
  params: {
    osType: 'Linux'
    vmNames: upgradeNames
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

output scaleSetId string = scaleSet.id

@description('Flexible: the resource ids of the instances upgraded here (Microsoft.Compute/virtualMachines/<name>, what the agents record as VmResourceId).')
output instanceIds array = [for n in upgradeNames: resourceId('Microsoft.Compute/virtualMachines', n)]
