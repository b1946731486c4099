#!/usr/bin/env bash
# service-test.sh: the Windows service under Wine's service manager. It builds
# crossproxy.exe, installs it as a service (crossproxy service install) that
# runs the real sync loop in standalone mode against the in-memory fake HNS,
# starts it, waits until the sync loop has programmed the manifests' Service
# (the ownership ledger lists its load balancer) and then a Service added to
# the manifests while it runs, checks the log file, the event log source and
# the entries written (Wine prints ReportEvent calls on its eventlog debug
# channel), stops it (clean exit, ledger kept: load balancers left in
# place) and uninstalls it. Everything lives in the test prefix
# test/.cache/wine; the service is removed on exit, also on failure.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
wine_exec=$root/test/wine/wine-exec
export WINEPREFIX=${WINEPREFIX:-$root/test/.cache/wine}
name=crossproxy-svctest
dir=$WINEPREFIX/drive_c/crossproxy-svctest
"$wine_exec" cmd /c exit 0 # creates the prefix and the ProcessPrng shim if missing
# Wine shuts the service manager and its services down a few seconds after the
# last ordinary Wine process exits; a persistent wineserver (this prefix's only,
# stopped on exit) keeps the service alive between the commands below.
export WINEDEBUG=-all
wineserver -k 2>/dev/null || true
wineserver -w
wineserver -p
# The first Wine process starts the service manager, whose services inherit its
# debug channels and stderr: with +eventlog, Wine prints every ReportEvent call
# (the event log entries the service writes) to this file.
evlog=$dir/eventlog.txt
rm -f "$evlog"
mkdir -p "$dir"
WINEDEBUG=-all,+eventlog "$wine_exec" cmd /c exit 0 2>>"$evlog"
# %ProgramData% of a Wine service is C:\users\Public (C:\ProgramData for a console process).
data=$WINEPREFIX/drive_c/users/Public/crossproxy
mkdir -p "$dir"
rm -f "$data/hns-owned-fake.json" "$data/$name.log" "$WINEPREFIX/drive_c/ProgramData/crossproxy/hns-owned-fake.json"
echo "service-test: building crossproxy.exe"
# -tags fakehns: the test build, with the hidden --fake-hns-network flag.
(cd "$root" && GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go build -tags fakehns -o "$dir/crossproxy.exe" ./cmd/crossproxy)
exe='C:\crossproxy-svctest\crossproxy.exe'

cat >"$dir/objects.yaml" <<'YAML'
apiVersion: v1
kind: Node
metadata:
  name: win-1
  labels: {kubernetes.io/os: windows}
status:
  addresses: [{type: InternalIP, address: 192.168.0.11}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ipFamilies: [IPv4]
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.2.7]
  nodeName: lin-1
  conditions: {ready: true, serving: true, terminating: false}
- addresses: [10.244.1.5] # on this node, but the fake HNS has no endpoint for it: a warning
  nodeName: win-1
  conditions: {ready: true, serving: true, terminating: false}
YAML

cx() { "$wine_exec" "$exe" "$@"; }
fail() { echo "service-test: FAIL: $*" >&2; [ -f "$data/$name.log" ] && sed 's/^/  log: /' "$data/$name.log" >&2; exit 1; }
cleanup() { cx service uninstall --name "$name" >/dev/null 2>&1 || true; }
finish() { cleanup; wineserver -k 2>/dev/null || true; }
trap finish EXIT
cleanup

install_out=$(cx service install --name "$name" --manual --fake-hns-network test-net -- \
  --manifests 'C:\crossproxy-svctest\objects.yaml' --node win-1 --network-name test-net --min-sync-period 100ms --ip-families IPv4 2>&1) ||
  fail "install: $install_out"
echo "$install_out"
"$wine_exec" reg query 'HKLM\SYSTEM\CurrentControlSet\Services\EventLog\Application\crossproxy-svctest' >/dev/null 2>&1 ||
  fail "event log source not registered"
# Restart also when the service stops itself with a non-zero exit code (the sync
# loop failing): Windows keeps fFailureActionsOnNonCrashFailures as the service
# key's FailureActionsOnNonCrashFailures value, which must be 1. Wine 8's service
# manager does not implement that setting: ChangeServiceConfig2W answers
# ERROR_INVALID_LEVEL and writes nothing (nor, for the restart actions it accepts,
# a FailureActions value). There install must say so rather than pass silently;
# TestInstallRestartsOnNonCrashFailures (cmd/crossproxy) proves the calls.
nc=$("$wine_exec" reg query "HKLM\\SYSTEM\\CurrentControlSet\\Services\\$name" /v FailureActionsOnNonCrashFailures 2>/dev/null |
  tr -d '\r' | awk '$1 == "FailureActionsOnNonCrashFailures" {print $3}') || true
if [ -n "$nc" ]; then
  [ "$nc" = 0x1 ] || fail "FailureActionsOnNonCrashFailures is $nc, want 0x1: a failing sync loop would not be restarted"
elif [[ $install_out != *"SERVICE_CONFIG_FAILURE_ACTIONS_FLAG"*"restarts after a crash only"* ]]; then
  fail "no FailureActionsOnNonCrashFailures value and no warning from install: $install_out"
else
  echo "service-test: this service manager (Wine) keeps no FailureActionsOnNonCrashFailures; install warned"
fi
out=$(cx service start --name "$name") || fail "start: $out"
echo "$out"
[[ $out == *state=Running* ]] || fail "service not running"

ledger=$data/hns-owned-fake.json
for _ in $(seq 1 100); do
  grep -q '"name": "web"' "$ledger" 2>/dev/null && break
  sleep 0.2
done
grep -q '"name": "web"' "$ledger" 2>/dev/null || fail "the sync loop did not program default/web (ledger: $(cat "$ledger" 2>/dev/null))"
grep -q '"kind": "ClusterIP"' "$ledger" || fail "ledger lacks the ClusterIP load balancer"
grep -q 'started as service' "$data/$name.log" || fail "no start entry in the log"
# The ledger is written during the sync, the log line after it: wait for both.
for _ in $(seq 1 50); do
  grep -q 'rules in sync' "$data/$name.log" && break
  sleep 0.2
done
grep -q 'rules in sync' "$data/$name.log" || fail "no sync in the log"

# The running service follows changes: a second Service appears in the manifests.
cat >>"$dir/objects.yaml" <<'YAML'
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.11
  clusterIPs: [10.96.0.11]
  ipFamilies: [IPv4]
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-abc
  namespace: default
  labels: {kubernetes.io/service-name: api}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.2.8]
  nodeName: lin-1
  conditions: {ready: true, serving: true, terminating: false}
YAML
for _ in $(seq 1 100); do
  grep -q '"name": "api"' "$ledger" 2>/dev/null && break
  sleep 0.2
done
grep -q '"name": "api"' "$ledger" || fail "the running service did not program the added Service default/api"

out=$(cx service stop --name "$name") || fail "stop: $out"
echo "$out"
[[ $out == *"state=Stopped pid=0 exit=0 service-exit=0"* ]] || fail "unclean stop"
grep -q 'stopped; load balancers left in place' "$data/$name.log" || fail "no stop entry in the log"
grep -q '"name": "web"' "$ledger" || fail "stopping removed ownership records"
if grep -q 'event log write failed' "$data/$name.log"; then fail "event log writes failed"; fi
grep -q "trace:eventlog:ReportEventW L\"crossproxy dev started as service $name" "$evlog" || fail "no start event in the event log: $(cat "$evlog")"
grep -q 'warn:eventlog:ReportEventW .*endpoints not known to HNS yet' "$evlog" || fail "no warning event in the event log: $(cat "$evlog")"
grep -q "trace:eventlog:ReportEventW L\"crossproxy service $name stopped; load balancers left in place" "$evlog" || fail "no stop event in the event log"

out=$(cx service uninstall --name "$name") || fail "uninstall: $out"
[[ $out == *"removed service $name"* ]] || fail "uninstall: $out"
if cx service status --name "$name" >/dev/null 2>&1; then fail "service still exists after uninstall"; fi
# A service whose sync loop cannot start (the manifest file is missing) must stop
# itself with service-specific exit code 1 and say why in the log.
cx service install --name "$name" --manual --fake-hns-network test-net -- \
  --manifests 'C:\crossproxy-svctest\missing.yaml' --node win-1 --network-name test-net >/dev/null
cx service start --name "$name" --timeout 3s >/dev/null 2>&1 || true
for _ in $(seq 1 50); do
  out=$(cx service status --name "$name" 2>&1) || true
  [[ $out == *state=Stopped* ]] && break
  sleep 0.2
done
[[ $out == *"state=Stopped"*"service-exit=1"* ]] || fail "a failing sync loop should stop the service with exit 1: $out"
grep -q "crossproxy service $name failed: .*missing.yaml" "$data/$name.log" || fail "no failure entry naming the cause in the log"
grep -q "err:eventlog:ReportEventW L\"crossproxy service $name failed: .*missing.yaml" "$evlog" || fail "no error event in the event log"
out=$(cx service uninstall --name "$name") || fail "uninstall: $out"

echo "service-test: PASS (install with restart on failure (non-crash flag checked, or warned where the service manager lacks it), start, sync loop against the fake HNS following a manifest change, event log source and entries (start, warning, stop, error), clean stop, uninstall; failing sync loop stops with exit 1)"
