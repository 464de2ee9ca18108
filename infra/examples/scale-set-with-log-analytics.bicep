// The copy-paste starting point: the Log Analytics side (infra/main.bicep: workspace, tables,
// Data Collection Rule, fleet identity with Monitoring Metrics Publisher, workbooks, alerts) and
// a small scale set whose instances install and start se-forwarder at first boot through
// cloud-init, wired to it. See docs/install.md.
//
//   az deployment group create -g <rg> -f infra/examples/scale-set-with-log-analytics.bicep \
//     -p subnetId=<subnet resource id> sshPublicKey=@~/.ssh/id_ed25519.pub packageVersion=0.1.0

targetScope = 'resourceGroup'

@description('Prefix of every resource name.')
param namePrefix string = 'se-forwarder'

param location string = resourceGroup().location

@description('Resource id of an existing subnet for the instances (outbound HTTPS needed).')
param subnetId string

@description('SSH public key for the admin user.')
param sshPublicKey string

@description('Pinned se-forwarder version from the package index; or give packageUri.')
param packageVersion string = ''

@description('URL of a se-forwarder wheel instead of a version from the package index.')
param packageUri string = ''

@minValue(1)
param instanceCount int = 2

module logs '../main.bicep' = {
  name: '${namePrefix}-log-analytics'
  params: {
    namePrefix: namePrefix
    location: location
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
    packageVersion: packageVersion
    packageUri: packageUri
    installWith: 'cloudInit'
  }
}

output scaleSetId string = scaleSet.outputs.scaleSetId
output logsIngestionEndpoint string = logs.outputs.logsIngestionEndpoint
output dcrImmutableId string = logs.outputs.dcrImmutableId
