// Types and functions shared by the templates, taken with compile-time imports
// (`import { name } from 'shared.bicep'`; the templates need Bicep 0.33.13 or newer for fail(),
// see infra/README.md). Nothing here deploys anything.
// Functions only see their arguments (a Bicep rule): every value comes in as a parameter.

// --- validation --------------------------------------------------------------------------------

@export()
@description('Log Analytics accepts a table\'s total retention of 4 to 730 days, or whole years: 1095, 1460, 1826, 2191, 2556, 2922, 3288, 3653, 4018 or 4383 days.')
func isValidTotalRetention(days int) bool => (days >= 4 && days <= 730) || contains([1095, 1460, 1826, 2191, 2556, 2922, 3288, 3653, 4018, 4383], days)

@export()
@description('days when Log Analytics accepts it as a total retention, else the deployment stops here with a message.')
func checkedTotalRetention(days int) int => isValidTotalRetention(days) ? days : fail('tableTotalRetentionInDays ${days} is refused by Log Analytics: give 4 to 730 days, or one of 1095, 1460, 1826, 2191, 2556, 2922, 3288, 3653, 4018, 4383 (whole years).')

@export()
@description('A download URL that carries no credential: https, no query string (a SAS token) and no user info. The VMs fetch it with their managed identity (Storage Blob Data Reader on the container), so nothing secret reaches customData or the deployment history.')
func plainUrl(url string, name string) string => !startsWith(url, 'https://') ? fail(plainUrlError(url, name)) : (contains(url, '?') || contains(split(url, '/')[2], '@') ? fail(plainUrlError(url, name)) : url)

func plainUrlError(url string, name string) string => '${name} must be an https:// URL without a query string or user info (no SAS: the VMs download it with their managed identity; grant it Storage Blob Data Reader on the container). Got: ${split(split(url, '?')[0], '@')[0]}...'

@export()
@description('The resource id of a Log Analytics workspace, else the deployment stops here with a message.')
func checkedWorkspaceId(id string) string => length(split(id, '/')) != 9 ? fail(workspaceIdError(id)) : (toLower(split(id, '/')[6]) == 'microsoft.operationalinsights' && toLower(split(id, '/')[7]) == 'workspaces' ? id : fail(workspaceIdError(id)))

func workspaceIdError(id string) string => '"${id}" is not a Log Analytics workspace resource id (/subscriptions/<id>/resourceGroups/<rg>/providers/Microsoft.OperationalInsights/workspaces/<name>): pass the workspaceResourceId output of infra/tables.bicep.'

// --- installing the agent ----------------------------------------------------------------------

@export()
@description('What the installers need, whatever runs them (Run Command, Custom Script extension, cloud-init).')
type installSettings = {
  @description('https URL of the se-forwarder wheel, or of an offline bundle (.tar.gz, infra/scripts/build-bundle.py: every wheel for every supported Python and architecture), in a blob container the identity can read (no SAS).')
  packageUri: string
  @description('sha256 of that file (64 hex digits): the installer refuses any other file, so write access to the container alone cannot change what the VMs run. Empty: the container is the only trust anchor (not recommended).')
  packageSha256: string
  @description('https URL of the wheel\'s dependency lock (infra/scripts/lock-dependencies.py), beside it; empty with a bundle (it carries one lock per Python version and architecture).')
  lockUri: string
  @description('Logs-ingestion endpoint (main.bicep output logsIngestionEndpoint).')
  logsIngestionEndpoint: string
  @description('Immutable id of the Data Collection Rule (main.bicep output dcrImmutableId).')
  dcrImmutableId: string
  @description('Stream of the lifecycle records (main.bicep output recordsStream).')
  recordsStream: string
  @description('Stream of the heartbeats (main.bicep output heartbeatsStream).')
  heartbeatsStream: string
  @description('Client id of the user-assigned identity the agent and the downloads use; empty = the system-assigned identity.')
  clientId: string
}

@export()
@description('The package settings, checked: an https URL with no credential, a sha256 of 64 characters or nothing (install.sh checks the digits), and a lock with a wheel but none with a bundle. Else the deployment stops here with a message.')
func checkedPackage(packageUri string, packageSha256 string, lockUri string) object => {
  packageUri: plainUrl(packageUri, 'packageUri')
  packageSha256: empty(packageSha256) || length(packageSha256) == 64 ? toLower(packageSha256) : fail('packageSha256 must be the 64 hex digits of sha256sum <package>, or empty.')
  lockUri: isBundle(packageUri) ? (empty(lockUri) ? '' : fail('lockUri must be empty with a bundle (.tar.gz): it carries one lock per Python version and architecture.')) : (empty(lockUri) ? fail('lockUri is required with a wheel: the dependency lock pins every package with its sha256 (infra/scripts/lock-dependencies.py), or publish a bundle instead (infra/scripts/build-bundle.py).') : plainUrl(lockUri, 'lockUri'))
}

@export()
@description('An offline bundle (every wheel, one lock per target: installed with no package index) rather than a wheel.')
func isBundle(packageUri string) bool => endsWith(split(packageUri, '?')[0], '.tar.gz')

@export()
@description('A value as one single-quoted shell word.')
func shellQuote(value string) string => '\'${replace(value, '\'', '\'\\\'\'')}\''

@export()
@description('Run Command parameters for install.sh on Linux. The handler exports named parameters as environment variables and appends unnamed ones to the command line unquoted, dropping empty values: so every value travels as a named parameter, read by install.sh --from-env, and the one unnamed word is the constant --from-env.')
func linuxRunCommandParameters(s installSettings, runId string) array => filter([
  {
    name: ''
    value: '--from-env'
  }
  {
    name: 'SE_INSTALL_PACKAGE'
    value: s.packageUri
  }
  {
    name: 'SE_INSTALL_PACKAGE_SHA256'
    value: s.packageSha256
  }
  {
    name: 'SE_INSTALL_LOCK'
    value: s.lockUri
  }
  {
    name: 'SE_INSTALL_PREREQUISITES'
    value: 'yes'
  }
  {
    name: 'SE_INSTALL_LOGS_ENDPOINT'
    value: s.logsIngestionEndpoint
  }
  {
    name: 'SE_INSTALL_DCR_ID'
    value: s.dcrImmutableId
  }
  {
    name: 'SE_INSTALL_RECORDS_STREAM'
    value: s.recordsStream
  }
  {
    name: 'SE_INSTALL_HEARTBEATS_STREAM'
    value: s.heartbeatsStream
  }
  {
    name: 'SE_INSTALL_CLIENT_ID'
    value: s.clientId
  }
  {
    name: 'SE_INSTALL_RUN_ID'
    value: runId
  }
], p => !empty(p.value))

@export()
@description('Run Command parameters for install.ps1 on Windows: the handler passes each as -Name value. Empty ones are left out (-ClientId: the system-assigned identity).')
func windowsRunCommandParameters(s installSettings) array => filter([
  {
    name: 'Package'
    value: s.packageUri
  }
  {
    name: 'PackageSha256'
    value: s.packageSha256
  }
  {
    name: 'Lock'
    value: s.lockUri
  }
  {
    name: 'LogsEndpoint'
    value: s.logsIngestionEndpoint
  }
  {
    name: 'DcrId'
    value: s.dcrImmutableId
  }
  {
    name: 'RecordsStream'
    value: s.recordsStream
  }
  {
    name: 'HeartbeatsStream'
    value: s.heartbeatsStream
  }
  {
    name: 'ClientId'
    value: s.clientId
  }
], p => !empty(p.value))

@export()
@description('The Custom Script extension command for install.sh (scale-set models): every value one quoted shell word (an empty --lock or --package-sha256 is no lock, no pin); the distribution\'s Python is installed first when none is usable. Retried up to 10 times, 90 s apart, while the download is refused (exit 11: a new role assignment takes minutes to apply) or IMDS does not answer yet (exit 12).')
func linuxInstallCommand(installerFile string, s installSettings) string => 'sh -c ${shellQuote('for i in 1 2 3 4 5 6 7 8 9 10; do "$0" "$@"; rc=$?; case $rc in 11|12) echo "se-forwarder install attempt $i failed (exit $rc)" >&2; [ "$i" = 10 ] || sleep 90 ;; *) exit $rc ;; esac; done; exit $rc')} bash ${shellQuote(installerFile)} --install-prerequisites --package ${shellQuote(s.packageUri)} --package-sha256 ${shellQuote(s.packageSha256)} --lock ${shellQuote(s.lockUri)} --logs-endpoint ${shellQuote(s.logsIngestionEndpoint)} --dcr-id ${shellQuote(s.dcrImmutableId)} --records-stream ${shellQuote(s.recordsStream)} --heartbeats-stream ${shellQuote(s.heartbeatsStream)} --client-id ${shellQuote(s.clientId)}'

@export()
@description('The Custom Script extension command for install.ps1. Windows PowerShell 5.1 drops an empty "" argument given through -File, so empty values (-ClientId for the system-assigned identity, -PackageSha256, -Lock) are left out.')
func windowsInstallCommand(installerFile string, s installSettings) string => 'powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -File ${installerFile} -Package "${s.packageUri}"${empty(s.packageSha256) ? '' : ' -PackageSha256 "${s.packageSha256}"'}${empty(s.lockUri) ? '' : ' -Lock "${s.lockUri}"'} -LogsEndpoint "${s.logsIngestionEndpoint}" -DcrId "${s.dcrImmutableId}" -RecordsStream "${s.recordsStream}" -HeartbeatsStream "${s.heartbeatsStream}"${empty(s.clientId) ? '' : ' -ClientId "${s.clientId}"'}'

@export()
@description('A value inside a single-quoted YAML scalar (a quote is doubled).')
func yamlQuoted(value string) string => replace(value, '\'', '\'\'')

@export()
@description('infra/cloud-init/se-forwarder.yaml (template) with its placeholders filled; installerGzBase64 is loadFileAsBase64 of infra/cloud-init/install.sh.gz. No webhook: customData is not a protected setting (install with the extension for one).')
func cloudInit(template string, installerGzBase64 string, s installSettings, f fleetSettings) string => replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(template, '__SE_TAGS__', yamlQuoted(join(f.tags, ','))), '__SE_POLICY_PRESET__', f.policyPreset == 'observe' ? '' : f.policyPreset), '__SE_POLICY_RULES__', yamlQuoted(empty(f.policyRules) ? '' : string(f.policyRules))), '__SE_INSTALL_SH_GZ_B64__', installerGzBase64), '__SE_PACKAGE__', yamlQuoted(s.packageUri)), '__SE_PACKAGE_SHA256__', yamlQuoted(s.packageSha256)), '__SE_LOCK__', yamlQuoted(s.lockUri)), '__SE_LOGS_ENDPOINT__', yamlQuoted(s.logsIngestionEndpoint)), '__SE_DCR_ID__', yamlQuoted(s.dcrImmutableId)), '__SE_RECORDS_STREAM__', yamlQuoted(s.recordsStream)), '__SE_HEARTBEATS_STREAM__', yamlQuoted(s.heartbeatsStream)), '__SE_CLIENT_ID__', yamlQuoted(s.clientId))

// --- one place to configure a fleet ------------------------------------------------------------

@export()
@description('What every install path (Run Command, extension, cloud-init, existing VMs and scale sets) writes into each VM\'s configuration, beside the sinks: install.sh --tags, --policy-preset, --policy-rules, --webhook-format (install.ps1 -Tags, -PolicyPreset, -PolicyRules, -WebhookFormat). The webhook URL, a secret, is a @secure() parameter of its own. Default: {tags: [], policyPreset: \'observe\', policyRules: [], webhookFormat: \'json\'}.')
type fleetSettings = {
  @description('VM tag names the agent records on every row (agent.tags), at most 10, e.g. ["service", "env"]: the fleet view and alert 6 group services by one (main.bicep serviceTag). The values are the VMs\' own Azure tags (a scale set\'s instances have the scale set\'s).')
  tags: string[]
  @description('[policy] preset: observe (the default: the agent never changes when maintenance happens) or microsoft (docs/policy.md).')
  policyPreset: 'observe' | 'microsoft'
  @description('[[policy.rules]] after the preset\'s, as objects with the keys of docs/policy.md (event_types, approve, ...). No hooks here: a hook runs a program that must exist on every VM; ship it in the image with a config file.')
  policyRules: object[]
  @description('Format of the webhook notifications when webhookUrl is given: json, slack or teams.')
  webhookFormat: 'json' | 'slack' | 'teams'
}

@export()
@description('The fleet settings, checked before anything is deployed: tag names Azure allows, at most 10; rules without hooks. Else the deployment stops here with a message (each VM\'s check-config validates the rest before its configuration is written).')
func checkedFleet(f fleetSettings) fleetSettings => length(f.tags) > 10 ? fail('fleet.tags: at most 10 tag names (got ${length(f.tags)}).') : (!empty(filter(f.tags, t => empty(t) || trim(t) != t || contains(t, ',') || contains(t, '<') || contains(t, '>') || contains(t, '%') || contains(t, '&') || contains(t, '\\') || contains(t, '?') || contains(t, '/'))) ? fail('fleet.tags: ${string(f.tags)}: a tag name is empty, has leading or trailing spaces, or holds one of , < > % & \\ ? / (Azure refuses them; the comma separates names).') : (!empty(filter(f.policyRules, r => contains(r, 'pre_hooks') || contains(r, 'post_hooks'))) ? fail('fleet.policyRules: hooks (pre_hooks, post_hooks) need [policy.hooks] programs on every VM: ship them in the image with a config file (install.sh --config-file).') : f))

@export()
@description('install.sh\'s words for the fleet settings, the non-default ones only; --webhook-format with a webhook.')
func fleetWords(f fleetSettings, webhook bool) string[] => concat(empty(f.tags) ? [] : ['--tags', join(f.tags, ',')], f.policyPreset == 'observe' ? [] : ['--policy-preset', f.policyPreset], empty(f.policyRules) ? [] : ['--policy-rules', string(f.policyRules)], webhook ? ['--webhook-format', f.webhookFormat] : [])

@export()
@description('Run Command parameters (install.sh --from-env) for the fleet settings; the webhook URL goes in protectedParameters (fleetProtectedParameters), never here.')
func fleetRunCommandParameters(f fleetSettings, webhook bool) array => filter([
  {
    name: 'SE_INSTALL_TAGS'
    value: join(f.tags, ',')
  }
  {
    name: 'SE_INSTALL_POLICY_PRESET'
    value: f.policyPreset == 'observe' ? '' : f.policyPreset
  }
  {
    name: 'SE_INSTALL_POLICY_RULES'
    value: empty(f.policyRules) ? '' : string(f.policyRules)
  }
  {
    name: 'SE_INSTALL_WEBHOOK_FORMAT'
    value: webhook ? f.webhookFormat : ''
  }
], p => !empty(p.value))

@export()
@description('The Run Command\'s protected parameters: the webhook URL (a secret: encrypted, never returned by Azure, never in the deployment\'s history when the template parameter is @secure()). install.sh --from-env reads SE_INSTALL_WEBHOOK_URL into a root-only systemd credential.')
func fleetProtectedParameters(webhookUrl string) array => empty(webhookUrl) ? [] : [
  {
    name: 'SE_INSTALL_WEBHOOK_URL'
    value: webhookUrl
  }
]

@export()
@description('The Custom Script extension command (protectedSettings) with the fleet settings: the webhook URL reaches install.sh through its environment (--webhook-url-env), inside the protected command only.')
func linuxFleetInstallCommand(installerFile string, s installSettings, f fleetSettings, webhookUrl string) string => '${empty(webhookUrl) ? '' : 'SE_INSTALL_WEBHOOK_URL=${shellQuote(webhookUrl)} '}${linuxInstallCommand(installerFile, s)}${join(map(concat(fleetWords(f, !empty(webhookUrl)), empty(webhookUrl) ? [] : ['--webhook-url-env', 'SE_INSTALL_WEBHOOK_URL']), w => ' ${shellQuote(w)}'), '')}'

@export()
@description('Run Command parameters for install.ps1 (-Tags, -PolicyPreset, -PolicyRules), the non-default ones.')
func windowsFleetParameters(f fleetSettings) array => filter([
  {
    name: 'Tags'
    value: join(f.tags, ',')
  }
  {
    name: 'PolicyPreset'
    value: f.policyPreset == 'observe' ? '' : f.policyPreset
  }
  {
    name: 'PolicyRules'
    value: empty(f.policyRules) ? '' : string(f.policyRules)
  }
], p => !empty(p.value))

@export()
@description('The Custom Script extension command for install.ps1 with the fleet settings (each a single-quoted PowerShell argument).')
func windowsFleetInstallCommand(installerFile string, s installSettings, f fleetSettings) string => '${windowsInstallCommand(installerFile, s)}${join(map(windowsFleetParameters(f), p => ' -${p.name} \'${replace(p.value, '\'', '\'\'')}\''), '')}'

@export()
@description('A webhook URL where the install path can keep it secret (Linux Run Command and extension), else the deployment stops here.')
func checkedWebhook(webhookUrl string, isLinux bool) string => empty(webhookUrl) || (isLinux && startsWith(webhookUrl, 'https://')) ? webhookUrl : fail(isLinux ? 'webhookUrl must be an https:// URL.' : 'webhookUrl: install.ps1 takes no webhook; configure one in the config file on Windows VMs.')

// --- Scheduled Events policy (opt-in; Compute API 2025-04-01 or newer) ---------------------------

@export()
@description('How Azure treats a reboot or redeploy a user starts (portal, CLI, API): azureDefault leaves the property out; automatic approves the event at once, so the operation does not wait for its NotBefore (agents may see it Started with little or no notice, EventSource User); waitForApproval holds it until the event is approved (an agent\'s StartRequests, `az maintenance scheduledevents acknowledge`) or its NotBefore passes.')
type userOperationApproval = 'azureDefault' | 'automatic' | 'waitForApproval'

@export()
@description('The scheduledEventsPolicy a VM or scale set gets.')
type scheduledEventsOptions = {
  @description('Also publish every Scheduled Event to Azure Resource Graph (maintenanceresources) and Event Grid (preview: subscription features Microsoft.Compute/SendScheduledEventsPolicy and, for Event Grid, Microsoft.Maintenance/ScheduledEventsActivity). Reading them needs Scheduled Event Contributor.')
  publishToEventGridAndResourceGraph: bool
  @description('User-initiated reboots: see userOperationApproval.')
  userInitiatedReboot: userOperationApproval
  @description('User-initiated redeploys: see userOperationApproval.')
  userInitiatedRedeploy: userOperationApproval
}
