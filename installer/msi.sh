#!/usr/bin/env bash
# msi.sh EXE CONFIG MSI_VERSION STAGE_DIR OUT.msi
# Builds the crossproxy MSI with wixl from installer/windows/crossproxy.wxs,
# then sets what wixl cannot express (component attributes, secure properties)
# with msibuild. With CERT and KEY set, EXE is signed before it is packed and
# the MSI after it is built.
set -euo pipefail
exe=$1 config=$2 version=$3 stage=$4 out=$5
here=$(cd "$(dirname "$0")" && pwd)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "msi: version $version is not X.Y.Z" >&2; exit 1; }
if [ -n "${CERT:-}" ]; then bash "$here/sign.sh" "$exe"; fi
rm -rf "$stage" && mkdir -p "$stage"
cp "$exe" "$stage/crossproxy.exe"
cp "$config" "$stage/config.yaml"
cp "$here/windows/crossproxy.wxs" "$stage/crossproxy.wxs"
# wixl resolves Source= relative to the .wxs file, hence the staging directory.
(cd "$stage" && wixl -a x64 -D Version="$version" -o crossproxy.msi crossproxy.wxs)
msi="$stage/crossproxy.msi"
# ConfigFile: 64-bit (256) + NeverOverwrite (128) + Permanent (16). The
# public properties are Secure so a managed install passes them to the server.
secure='WIX_DOWNGRADE_DETECTED;WIX_UPGRADE_DETECTED;KUBECONFIG;NETWORKNAME;SOURCEVIP;NODENAME;CLUSTERCIDR;ENABLEDSR;EXTRAARGS'
msibuild "$msi" -q "UPDATE \`Component\` SET \`Attributes\` = 400 WHERE \`Component\` = 'ConfigFile'"
msibuild "$msi" -q "UPDATE \`Property\` SET \`Value\` = '$secure' WHERE \`Property\` = 'SecureCustomProperties'"
# Same-version rebuilds upgrade too (wixl ignores AllowSameVersionUpgrades):
# MigrateFeatures (1) + IncludeMaximum (512) on the upgrade row.
# Attributes is part of the Upgrade table's key, so the table is rewritten.
msiinfo export "$msi" Upgrade | awk -F'\t' 'BEGIN{OFS="\t"} {sub(/\r$/, "")} NR>3 && $7=="WIX_UPGRADE_DETECTED"{$5=513} {printf "%s\r\n", $0}' > "$stage/Upgrade.idt"
msibuild "$msi" -i "$stage/Upgrade.idt"
# Restart on failure, as `crossproxy service install` sets it (5 s, 10 s, 30 s,
# reset after a day): the MsiServiceConfigFailureActions table (Windows
# Installer 5.0), which wixl cannot write, run by the MsiConfigureServices
# action between InstallServices (5800) and StartServices (5900). Event 5 =
# install (1) + reinstall (4); Actions 1 = SC_ACTION_RESTART.
printf '%s\r\n' \
  $'MsiServiceConfigFailureActions\tName\tEvent\tResetPeriod\tRebootMessage\tCommand\tActions\tDelayActions\tComponent_' \
  $'s72\ts255\ti2\tI4\tS255\tS255\tS255\tS255\ts72' \
  $'MsiServiceConfigFailureActions\tMsiServiceConfigFailureActions' \
  $'CrossproxyRestart\tcrossproxy\t5\t86400\t\t\t1[~]1[~]1\t5000[~]10000[~]30000\tCrossproxyExe' \
  > "$stage/MsiServiceConfigFailureActions.idt"
msibuild "$msi" -i "$stage/MsiServiceConfigFailureActions.idt"
# Those actions cover a crash only, unless the failure actions flag is set: when
# the sync loop ends by itself the service reports SERVICE_STOPPED with a
# service-specific exit code, and Windows runs the actions for that only with
# fFailureActionsOnNonCrashFailures TRUE. The MsiServiceConfig table (Windows
# Installer 5.0, also run by MsiConfigureServices) sets it: ConfigType 4 =
# SERVICE_CONFIG_FAILURE_ACTIONS_FLAG, Argument 1 = also on a stop with a
# non-zero exit code; Event 5 as above. `crossproxy service install` sets the same.
printf '%s\r\n' \
  $'MsiServiceConfig\tName\tEvent\tConfigType\tArgument\tComponent_' \
  $'s72\ts255\ti2\ti4\tS255\ts72' \
  $'MsiServiceConfig\tMsiServiceConfig' \
  $'CrossproxyRestartNonCrash\tcrossproxy\t5\t4\t1\tCrossproxyExe' \
  > "$stage/MsiServiceConfig.idt"
msibuild "$msi" -i "$stage/MsiServiceConfig.idt"
msibuild "$msi" -q "INSERT INTO \`InstallExecuteSequence\` (\`Action\`, \`Condition\`, \`Sequence\`) VALUES ('MsiConfigureServices', 'VersionMsi >= \"5.00\"', 5850)"
# (grep reads whole exports: with -q and pipefail, SIGPIPE would fail them.)
msiinfo export "$msi" Component > "$stage/Component.idt"
msiinfo export "$msi" Upgrade > "$stage/Upgrade.check"
msiinfo export "$msi" MsiServiceConfigFailureActions > "$stage/FailureActions.check"
msiinfo export "$msi" MsiServiceConfig > "$stage/ServiceConfig.check"
grep -qP '^CrossproxyRestart\tcrossproxy\t5\t86400\t\t\t1\[~\]1\[~\]1\t' "$stage/FailureActions.check" || { echo "msi: restart on failure not set" >&2; exit 1; }
grep -qP '^CrossproxyRestartNonCrash\tcrossproxy\t5\t4\t1\tCrossproxyExe\r?$' "$stage/ServiceConfig.check" || { echo "msi: restart on a non-crash failure not set" >&2; exit 1; }
grep -qP '^ConfigFile\t.*\t400\t' "$stage/Component.idt" || { echo "msi: ConfigFile attributes not set" >&2; exit 1; }
grep -qP '\t513\t\tWIX_UPGRADE_DETECTED\r?$' "$stage/Upgrade.check" || { echo "msi: upgrade attributes not set" >&2; exit 1; }
if [ -n "${CERT:-}" ]; then bash "$here/sign.sh" "$msi"; fi
mkdir -p "$(dirname "$out")"
mv "$msi" "$out"
echo "built $out (MSI version $version)"
