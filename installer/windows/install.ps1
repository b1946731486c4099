#Requires -Version 5.1
<#
.SYNOPSIS
Installs, upgrades or uninstalls crossproxy (the Kubernetes Service proxy) on a Windows node.

.DESCRIPTION
From a local MSI (-Msi): runs msiexec with the settings as MSI properties; a newer MSI
upgrades in place, the same one reinstalls.
From a bare binary (-Binary): copies crossproxy.exe to Program Files\crossproxy, writes
ProgramData\crossproxy\config.yaml if there is none, and creates or updates the
"crossproxy" service (automatic start, restart on failure).
With -Url the MSI or exe is downloaded first (the only network access this script makes),
and checked against -Sha256 when given.

Settings left out keep the values of the last install (HKLM\SOFTWARE\crossproxy), the same
way the MSI remembers them. config.yaml is never overwritten: edit it in place.
Running the same command twice leaves the node as one run would.

.EXAMPLE
.\install.ps1 -Msi .\crossproxy-v0.1.0-x64.msi -NetworkName Calico -Kubeconfig C:\k\config

.EXAMPLE
.\install.ps1 -Binary .\crossproxy-v0.1.0-windows-amd64.exe -NetworkName vxlan0 -SourceVip 10.244.3.2

.EXAMPLE
.\install.ps1 -Uninstall -Cleanup
#>
[CmdletBinding(DefaultParameterSetName = 'Msi')]
param(
    # A local crossproxy MSI to install or upgrade with.
    [Parameter(ParameterSetName = 'Msi', Mandatory = $true)]
    [string]$Msi,

    # A local crossproxy.exe to install as a service without the MSI.
    [Parameter(ParameterSetName = 'Binary', Mandatory = $true)]
    [string]$Binary,

    # Download the MSI (.msi) or binary (.exe) from this URL first.
    [Parameter(ParameterSetName = 'Url', Mandatory = $true)]
    [string]$Url,

    # The expected SHA-256 of the download (from SHA256SUMS).
    [Parameter(ParameterSetName = 'Url')]
    [string]$Sha256,

    # Remove crossproxy (MSI or bare-binary install, whichever is there).
    [Parameter(ParameterSetName = 'Uninstall', Mandatory = $true)]
    [switch]$Uninstall,

    # With -Uninstall: remove crossproxy's HNS load balancers and endpoints first (crossproxy
    # cleanup, on the network the service runs with, else on the one its ledger recorded).
    [Parameter(ParameterSetName = 'Uninstall')]
    [switch]$Cleanup,

    # With -Uninstall: also delete ProgramData\crossproxy (config and kubeconfig).
    [Parameter(ParameterSetName = 'Uninstall')]
    [switch]$RemoveConfig,

    [string]$Kubeconfig,
    [string]$NetworkName,
    [string]$SourceVip,
    [string]$NodeName,
    [string]$ClusterCIDR,
    [switch]$EnableDSR,
    [string]$ExtraArgs,

    # A config.yaml to put in ProgramData\crossproxy when none is there yet.
    [string]$ConfigFile,

    [string]$InstallDir = (Join-Path $env:ProgramFiles 'crossproxy'),
    [string]$LogDir = $env:TEMP
)

Set-StrictMode -Version 3.0
$ErrorActionPreference = 'Stop'

$ServiceName = 'crossproxy'
$RegistryKey = 'HKLM:\SOFTWARE\crossproxy'
$ConfigDir = Join-Path $env:ProgramData 'crossproxy'
$ConfigPath = Join-Path $ConfigDir 'config.yaml'

# One row per setting: script parameter, MSI property, registry value, service flag, and
# whether the MSI quotes the value on its command line. The MSI (crossproxy.wxs) maps the same way; the
# installer tests compare the two.
$Settings = @(
    @{ Param = 'Kubeconfig';  Property = 'KUBECONFIG';  Value = 'Kubeconfig';  Flag = '--kubeconfig';        Quote = $true },
    @{ Param = 'NetworkName'; Property = 'NETWORKNAME'; Value = 'NetworkName'; Flag = '--network-name';      Quote = $true },
    @{ Param = 'SourceVip';   Property = 'SOURCEVIP';   Value = 'SourceVip';   Flag = '--source-vip';        Quote = $false },
    @{ Param = 'NodeName';    Property = 'NODENAME';    Value = 'NodeName';    Flag = '--hostname-override'; Quote = $false },
    @{ Param = 'ClusterCIDR'; Property = 'CLUSTERCIDR'; Value = 'ClusterCIDR'; Flag = '--cluster-cidr';      Quote = $false },
    @{ Param = 'EnableDSR';   Property = 'ENABLEDSR';   Value = 'EnableDSR';   Flag = '--enable-dsr';        Quote = $false },
    @{ Param = 'ExtraArgs';   Property = 'EXTRAARGS';   Value = 'ExtraArgs';   Flag = '';                    Quote = $false }
)

# The "crossproxy run" flag naming the HNS network as the installed service's command line
# (its ImagePath) carries it: --network-name VALUE (crossproxy service install), --network-name
# "VALUE" (the MSI quotes it) or --network-name=VALUE (in EXTRAARGS). The installer tests run
# this pattern on the command lines both installers write.
$NetworkFlagPattern = '(?:^|\s)--network-name(?:=|\s+)(?:"(?<quoted>[^"]*)"|(?<bare>[^\s"]+))'

# The config a bare-binary install writes when there is none (the MSI ships the same file,
# installer/windows/config.yaml).
$DefaultConfig = @'
# crossproxy's config on a Windows node (C:\ProgramData\crossproxy\config.yaml):
# a kube-proxy KubeProxyConfiguration, mode kernelspace (HNS). The MSI installs
# it once and never overwrites it, so edit it in place; flags given to the
# service (MSI properties) override it.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: kernelspace
clientConnection:
  kubeconfig: C:\ProgramData\crossproxy\kubeconfig
# The cluster's pod CIDR(s), comma-separated.
clusterCIDR: ""
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
syncPeriod: 30s
minSyncPeriod: 1s
winkernel:
  # The HNS network the pods are attached to (Calico: "Calico"; flannel
  # vxlan: "flannel.4096" or "vxlan0"; l2bridge CNIs: the bridge network's
  # name). Empty: the node's CNI configuration's network, else the only
  # Overlay or L2Bridge network on the node.
  networkName: ""
  # Overlay networks only: the node's source VIP for load-balanced traffic.
  # Empty: the node finds its own (its Node's crossproxy.io/source-vip
  # annotation, else calico-node's Calico_ep or the source-VIP endpoint
  # already on the network, else an address reserved from the network's
  # subnet through the pods' host-local).
  sourceVip: ""
  enableDSR: false
'@

function Fail([string]$Message) {
    throw "install.ps1: $Message"
}

function Assert-Administrator {
    $principal = New-Object Security.Principal.WindowsPrincipal([Security.Principal.WindowsIdentity]::GetCurrent())
    if (-not $principal.IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)) {
        Fail 'run this from an elevated PowerShell (Run as administrator).'
    }
}

# Get-SettingValues merges the parameters given with the values remembered from the last
# install: a parameter given (even an empty string) wins.
function Get-SettingValues([hashtable]$Given) {
    $remembered = $null
    if (Test-Path $RegistryKey) { $remembered = Get-ItemProperty -Path $RegistryKey }
    $values = [ordered]@{}
    foreach ($s in $Settings) {
        $v = ''
        if ($Given.ContainsKey($s.Param)) {
            $v = [string]$Given[$s.Param]
            if ($Given[$s.Param] -is [System.Management.Automation.SwitchParameter]) {
                $v = if ($Given[$s.Param].IsPresent) { '1' } else { '' }
            }
        } elseif ($null -ne $remembered -and ($remembered.PSObject.Properties.Name -contains $s.Value)) {
            $v = [string]$remembered.($s.Value)
        }
        $values[$s.Param] = $v
    }
    return $values
}

# Get-MsiArguments builds msiexec's arguments: each setting that has a value becomes a
# PROPERTY="value" pair; empty ones are left to the MSI's own memory.
function Get-MsiArguments([string]$MsiPath, [string]$LogPath, $Values) {
    $msiArgs = @('/i', ('"{0}"' -f $MsiPath), '/qn', '/norestart', '/l*v', ('"{0}"' -f $LogPath))
    foreach ($s in $Settings) {
        $v = $Values[$s.Param]
        if ($v -ne '') {
            $msiArgs += ('{0}="{1}"' -f $s.Property, ($v -replace '"', '""'))
        }
    }
    return $msiArgs
}

# Get-RunArguments builds the "crossproxy run" flags the service starts with, the same
# flags the MSI puts after "service run --".
function Get-RunArguments($Values) {
    $runArgs = @('--config', $ConfigPath)
    foreach ($s in $Settings) {
        $v = $Values[$s.Param]
        if ($v -eq '') { continue }
        if ($s.Param -eq 'EnableDSR') {
            if ($v -eq '1') { $runArgs += '--enable-dsr' }
        } elseif ($s.Flag -eq '') {
            $runArgs += @($v -split '\s+' | Where-Object { $_ -ne '' })
        } else {
            $runArgs += @($s.Flag, $v)
        }
    }
    return $runArgs
}

function Save-SettingValues($Values, [string]$InstalledBy, [string]$Version) {
    if (-not (Test-Path $RegistryKey)) { New-Item -Path $RegistryKey -Force | Out-Null }
    foreach ($s in $Settings) {
        Set-ItemProperty -Path $RegistryKey -Name $s.Value -Value $Values[$s.Param]
    }
    Set-ItemProperty -Path $RegistryKey -Name 'InstallDir' -Value ($InstallDir.TrimEnd('\') + '\')
    Set-ItemProperty -Path $RegistryKey -Name 'InstalledBy' -Value $InstalledBy
    Set-ItemProperty -Path $RegistryKey -Name 'Version' -Value $Version
}

# Get-InstallKind tells how crossproxy is installed now: 'msi', 'binary' or 'none'.
function Get-InstallKind {
    if (Get-MsiProductCode) { return 'msi' }
    if (Test-Path $RegistryKey) {
        $by = (Get-ItemProperty -Path $RegistryKey).PSObject.Properties['InstalledBy']
        if ($null -ne $by -and $by.Value -eq 'install.ps1') { return 'binary' }
    }
    if (Get-Service -Name $ServiceName -ErrorAction SilentlyContinue) { return 'binary' }
    return 'none'
}

# Get-MsiProductCode finds the installed crossproxy MSI in the uninstall registry.
function Get-MsiProductCode {
    $roots = @('HKLM:\SOFTWARE\Microsoft\Windows\CurrentVersion\Uninstall\*')
    foreach ($entry in Get-ItemProperty -Path $roots -ErrorAction SilentlyContinue) {
        $name = $entry.PSObject.Properties['DisplayName']
        $wi = $entry.PSObject.Properties['WindowsInstaller']
        if ($null -ne $name -and $name.Value -eq 'crossproxy' -and $null -ne $wi -and $wi.Value -eq 1) {
            return $entry.PSChildName
        }
    }
    return $null
}

function Invoke-Msiexec([string[]]$Arguments, [string]$LogPath) {
    Write-Host "msiexec $($Arguments -join ' ')"
    $p = Start-Process -FilePath 'msiexec.exe' -ArgumentList $Arguments -Wait -PassThru
    switch ($p.ExitCode) {
        0 { return }
        3010 { Write-Warning 'done; Windows asks for a reboot to finish.'; return }
        1618 { Fail "another installation is in progress; try again when it ends (log: $LogPath)." }
        1638 { Fail "another version of crossproxy is installed (log: $LogPath)." }
        default {
            if (Test-Path $LogPath) {
                Get-Content -Path $LogPath -Tail 30 | Write-Host
            }
            Fail "msiexec failed with exit code $($p.ExitCode); see $LogPath."
        }
    }
}

function Wait-ServiceStatus([string]$Status, [int]$Seconds = 30) {
    $svc = Get-Service -Name $ServiceName
    try {
        $svc.WaitForStatus($Status, [TimeSpan]::FromSeconds($Seconds))
    } catch {
        Fail "service $ServiceName did not reach $Status within $Seconds s (now $((Get-Service -Name $ServiceName).Status)); see the Application event log, source crossproxy."
    }
}

function Get-Download([string]$From, [string]$Hash) {
    $name = [IO.Path]::GetFileName(([Uri]$From).AbsolutePath)
    if ($name -notmatch '\.(msi|exe)$') { Fail "-Url must end in .msi or .exe: $From" }
    $dest = Join-Path $env:TEMP $name
    [Net.ServicePointManager]::SecurityProtocol = [Net.SecurityProtocolType]::Tls12
    Write-Host "downloading $From"
    Invoke-WebRequest -Uri $From -OutFile $dest -UseBasicParsing
    if ($Hash) {
        $got = (Get-FileHash -Path $dest -Algorithm SHA256).Hash
        if ($got -ne $Hash.ToUpperInvariant()) {
            Remove-Item -Path $dest -Force
            Fail "checksum mismatch for ${From}: got $got, want $Hash"
        }
    } else {
        Write-Warning 'no -Sha256 given: the download is not verified.'
    }
    return $dest
}

function Install-FromMsi([string]$MsiPath, $Values) {
    if (-not (Test-Path -Path $MsiPath -PathType Leaf)) { Fail "no such MSI: $MsiPath" }
    $MsiPath = (Resolve-Path -Path $MsiPath).Path
    if ((Get-InstallKind) -eq 'binary') {
        Write-Host 'replacing the bare-binary install with the MSI'
        Uninstall-Binary
    }
    $log = Join-Path $LogDir ('crossproxy-msi-{0}.log' -f (Get-Date -Format 'yyyyMMddHHmmss'))
    Invoke-Msiexec -Arguments (Get-MsiArguments -MsiPath $MsiPath -LogPath $log -Values $Values) -LogPath $log
    Wait-ServiceStatus -Status 'Running'
    Write-Host "crossproxy installed from $MsiPath and running"
}

function Install-FromBinary([string]$ExePath, $Values) {
    if (-not (Test-Path -Path $ExePath -PathType Leaf)) { Fail "no such binary: $ExePath" }
    if ((Get-InstallKind) -eq 'msi') {
        Fail 'crossproxy is installed from an MSI; upgrade with -Msi, or uninstall first (-Uninstall).'
    }
    $ExePath = (Resolve-Path -Path $ExePath).Path
    $version = (& $ExePath version) -join ' '
    if ($LASTEXITCODE -ne 0) { Fail "$ExePath does not run: $version" }

    $target = Join-Path $InstallDir 'crossproxy.exe'
    $svc = Get-Service -Name $ServiceName -ErrorAction SilentlyContinue
    if ($svc -and $svc.Status -ne 'Stopped') {
        Stop-Service -Name $ServiceName -Force
        Wait-ServiceStatus -Status 'Stopped'
    }
    New-Item -ItemType Directory -Path $InstallDir -Force | Out-Null
    if ($ExePath -ne $target) { Copy-Item -Path $ExePath -Destination $target -Force }

    New-Item -ItemType Directory -Path $ConfigDir -Force | Out-Null
    if (-not (Test-Path $ConfigPath)) {
        if ($ConfigFile) {
            Copy-Item -Path $ConfigFile -Destination $ConfigPath
        } else {
            Set-Content -Path $ConfigPath -Value $DefaultConfig -Encoding ASCII
        }
        Write-Host "wrote $ConfigPath"
    } elseif ($ConfigFile) {
        Write-Warning "$ConfigPath exists and is kept; -ConfigFile ignored."
    }

    # The binary registers itself: the service ("service run -- RUN-FLAGS"), restart on
    # failure and the event log source. An existing registration is replaced.
    $runArgs = Get-RunArguments -Values $Values
    if ($svc) {
        & $target service uninstall --name $ServiceName | Out-Null
        if ($LASTEXITCODE -ne 0) { Fail "crossproxy service uninstall failed ($LASTEXITCODE)" }
    }
    # '--' goes in quoted: a bare -- could be taken as PowerShell's own end-of-parameters token.
    $installArgs = @('service', 'install', '--name', $ServiceName, '--binary', $target, '--') + $runArgs
    $out = & $target @installArgs 2>&1
    if ($LASTEXITCODE -ne 0) { Fail "crossproxy service install failed ($LASTEXITCODE): $out" }
    Save-SettingValues -Values $Values -InstalledBy 'install.ps1' -Version $version
    Start-Service -Name $ServiceName
    Wait-ServiceStatus -Status 'Running'
    Write-Host "crossproxy ($version) installed from $ExePath and running: $out"
}

function Uninstall-Binary {
    $svc = Get-Service -Name $ServiceName -ErrorAction SilentlyContinue
    if ($svc) {
        $exe = Join-Path $InstallDir 'crossproxy.exe'
        if (Test-Path $exe) {
            # Stops the service, removes it and its event log source.
            & $exe service uninstall --name $ServiceName | Out-Null
        } else {
            Stop-Service -Name $ServiceName -Force -ErrorAction SilentlyContinue
            & sc.exe delete $ServiceName | Out-Null
        }
        if ($LASTEXITCODE -ne 0) { Fail "removing service $ServiceName failed ($LASTEXITCODE)" }
    }
    if (Test-Path $InstallDir) { Remove-Item -Path $InstallDir -Recurse -Force }
    if (Test-Path $RegistryKey) { Remove-Item -Path $RegistryKey -Recurse -Force }
}

# Get-ServiceCommandLine returns the installed service's command line (its ImagePath, which
# both installers write), or '' when there is no service.
function Get-ServiceCommandLine {
    $key = "HKLM:\SYSTEM\CurrentControlSet\Services\$ServiceName"
    if (-not (Test-Path $key)) { return '' }
    $p = (Get-ItemProperty -Path $key).PSObject.Properties['ImagePath']
    if ($null -eq $p) { return '' }
    return [string]$p.Value
}

# Get-ServiceNetwork returns the HNS network named on a service command line: the last
# --network-name, as "crossproxy run" takes the last one; '' when it names none.
function Get-ServiceNetwork([string]$CommandLine) {
    $network = ''
    foreach ($m in [regex]::Matches($CommandLine, $NetworkFlagPattern)) {
        if ($m.Groups['quoted'].Success) { $network = $m.Groups['quoted'].Value } else { $network = $m.Groups['bare'].Value }
    }
    return $network
}

# Find-InstalledExe returns the crossproxy.exe to run cleanup with: the one the service runs
# (the command line's first word, quoted when the path has spaces), else the one in the
# remembered install directory (an MSI install may have been given INSTALLDIR), else in
# -InstallDir; $null when none exists.
function Find-InstalledExe([string]$CommandLine) {
    $candidates = @()
    if ($CommandLine -match '^\s*"([^"]+)"') {
        $candidates += $Matches[1]
    } elseif ($CommandLine -match '^\s*(\S+)') {
        $candidates += $Matches[1]
    }
    if (Test-Path $RegistryKey) {
        $dir = (Get-ItemProperty -Path $RegistryKey).PSObject.Properties['InstallDir']
        if ($null -ne $dir -and [string]$dir.Value -ne '') { $candidates += (Join-Path ([string]$dir.Value) 'crossproxy.exe') }
    }
    $candidates += (Join-Path $InstallDir 'crossproxy.exe')
    foreach ($c in $candidates) {
        if (Test-Path -Path $c -PathType Leaf) { return $c }
    }
    return $null
}

# Get-CleanupArguments builds the "crossproxy cleanup" arguments. The network is -NetworkName
# when given, else the one the installed service runs with, else the remembered setting. With
# none (a default install, where crossproxy finds the network itself) no --network-name is
# passed: crossproxy cleanup then uses the network its ledger recorded when the service synced.
function Get-CleanupArguments([hashtable]$Given, [string]$CommandLine) {
    $network = ''
    if ($Given.ContainsKey('NetworkName')) { $network = [string]$Given['NetworkName'] }
    if ($network -eq '') { $network = Get-ServiceNetwork -CommandLine $CommandLine }
    if ($network -eq '') { $network = (Get-SettingValues -Given @{})['NetworkName'] }
    $cleanupArgs = @('cleanup')
    if ($network -ne '') { $cleanupArgs += @('--network-name', $network) }
    return $cleanupArgs
}

function Invoke-Uninstall {
    $kind = Get-InstallKind
    if ($kind -eq 'none') {
        Write-Host 'crossproxy is not installed; nothing to do'
    } else {
        if ($Cleanup) {
            $commandLine = Get-ServiceCommandLine
            $exe = Find-InstalledExe -CommandLine $commandLine
            if ($null -eq $exe) {
                Fail "-Cleanup: no crossproxy.exe found (service command line: '$commandLine'; $InstallDir); nothing was uninstalled. Uninstall without -Cleanup and remove the load balancers by hand."
            }
            $cleanupArgs = Get-CleanupArguments -Given $given -CommandLine $commandLine
            # Stopped first: a running service would put the load balancers back.
            Stop-Service -Name $ServiceName -Force -ErrorAction SilentlyContinue
            Write-Host "$exe $($cleanupArgs -join ' ')"
            & $exe @cleanupArgs
            if ($LASTEXITCODE -ne 0) { Fail "crossproxy cleanup failed ($LASTEXITCODE); nothing was uninstalled." }
        }
        if ($kind -eq 'msi') {
            $code = Get-MsiProductCode
            $log = Join-Path $LogDir ('crossproxy-msi-uninstall-{0}.log' -f (Get-Date -Format 'yyyyMMddHHmmss'))
            Invoke-Msiexec -Arguments @('/x', $code, '/qn', '/norestart', '/l*v', ('"{0}"' -f $log)) -LogPath $log
        } else {
            Uninstall-Binary
        }
        Write-Host 'crossproxy uninstalled'
    }
    if ($RemoveConfig -and (Test-Path $ConfigDir)) {
        Remove-Item -Path $ConfigDir -Recurse -Force
        Write-Host "removed $ConfigDir"
    }
}

Assert-Administrator
$given = @{}
foreach ($s in $Settings) {
    if ($PSBoundParameters.ContainsKey($s.Param)) { $given[$s.Param] = $PSBoundParameters[$s.Param] }
}

switch ($PSCmdlet.ParameterSetName) {
    'Uninstall' { Invoke-Uninstall }
    'Msi' { Install-FromMsi -MsiPath $Msi -Values (Get-SettingValues -Given $given) }
    'Binary' { Install-FromBinary -ExePath $Binary -Values (Get-SettingValues -Given $given) }
    'Url' {
        $file = Get-Download -From $Url -Hash $Sha256
        if ($file -like '*.msi') {
            Install-FromMsi -MsiPath $file -Values (Get-SettingValues -Given $given)
        } else {
            Install-FromBinary -ExePath $file -Values (Get-SettingValues -Given $given)
        }
    }
}
