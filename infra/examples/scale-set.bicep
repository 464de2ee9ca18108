// A small Linux scale set running se-forwarder, installed either by cloud-init at first boot
// (customData from infra/cloud-init/se-forwarder.yaml, the default) or by the Custom Script
// extension in the scale set's extensionProfile (infra/modules/vm-agent.bicep).
//
// Deploy it through scale-set-with-log-analytics.bicep (which creates the Log Analytics side
// first), or on its own with the values of an existing main.bicep deployment's outputs.
// The subnet must already exist (and allow outbound HTTPS to Azure Monitor and the package index).

targetScope = 'resourceGroup'

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

param recordsStream string = 'Custom-ScheduledEvents'
param heartbeatsStream string = 'Custom-ScheduledEventsAgent'

@description('Pinned se-forwarder version from the package index; or give packageUri.')
param packageVersion string = ''

@description('URL of a se-forwarder wheel (e.g. a blob with a SAS, or a release asset). Secure: a SAS is a credential.')
@secure()
param packageUri string = ''

@description('cloudInit: customData installs the agent at first boot. extension: the Custom Script extension does.')
@allowed([
  'cloudInit'
  'extension'
])
param installWith string = 'cloudInit'

@description('With installWith=extension: URL of install.sh (a storage blob fetched with the identity).')
param installerUri string = ''

param tags object = {}

var useCloudInit = installWith == 'cloudInit'
var usePackageUri = !empty(packageUri)

// infra/cloud-init/se-forwarder.yaml with its placeholders filled; install.sh travels inside it.
var cloudInit = replace(replace(replace(replace(replace(replace(loadTextContent('../cloud-init/se-forwarder.yaml'), '__SE_INSTALL_SH_B64__', loadFileAsBase64('../scripts/install.sh')), '__SE_PACKAGE_OPTION__', usePackageUri ? '--package' : '--version'), '__SE_PACKAGE__', usePackageUri ? packageUri : packageVersion), '__SE_LOGS_ENDPOINT__', logsIngestionEndpoint), '__SE_DCR_ID__', dcrImmutableId), '__SE_CLIENT_ID__', identityClientId)

// Only its output is used here (the public half of the extension for the extensionProfile); it
// deploys nothing. The protectedSettings are built below: a module output would keep them, with
// packageUri's SAS, in plain text in the deployment history.
module agent '../modules/vm-agent.bicep' = if (!useCloudInit) {
  name: '${name}-agent-extension'
  params: {
    osType: 'Linux'
    installerUri: installerUri
    fetchWithManagedIdentity: true
    fileFetchIdentityClientId: identityClientId
    packageVersion: packageVersion
    logsIngestionEndpoint: logsIngestionEndpoint
    dcrImmutableId: dcrImmutableId
    recordsStream: recordsStream
    heartbeatsStream: heartbeatsStream
    agentIdentityClientId: identityClientId
  }
}

// The extension's command: the same text as vm-agent.bicep's linuxCommand (a test holds them equal).
var installerFile = last(split(split(installerUri, '?')[0], '/'))
var linuxCommand = format('bash {0} {1} \'{2}\' --logs-endpoint \'{3}\' --dcr-id \'{4}\' --records-stream \'{5}\' --heartbeats-stream \'{6}\' --client-id \'{7}\'', installerFile, usePackageUri ? '--package' : '--version', usePackageUri ? packageUri : packageVersion, logsIngestionEndpoint, dcrImmutableId, recordsStream, heartbeatsStream, identityClientId)
var extensionProtectedSettings = {
  commandToExecute: linuxCommand
  fileUris: [
    installerUri
  ]
  managedIdentity: {
    clientId: identityClientId
  }
}

resource scaleSet 'Microsoft.Compute/virtualMachineScaleSets@2024-11-01' = {
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
    // extension, which this small example does not have; Automatic would restart every instance
    // at once on a model change.
    upgradePolicy: {
      mode: 'Manual'
    }
    virtualMachineProfile: {
      osProfile: {
        computerNamePrefix: take(name, 9)
        adminUsername: adminUsername
        customData: useCloudInit ? base64(cloudInit) : null
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
            name: agent.outputs.extensionProfileEntry.name
            properties: union(agent.outputs.extensionProfileEntry.properties, {
              protectedSettings: extensionProtectedSettings
            })
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
