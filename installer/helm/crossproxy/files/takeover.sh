# takeover.sh: run by the crossproxy-takeover Job (sh, kubectl). Deletes
# nothing until a crossproxy pod is Ready on every node a kube-proxy pod (Linux
# or Windows) runs on, and until kube-proxy's DaemonSets and ConfigMap are kept
# as they were in the ConfigMap $BACKUP (restore.sh brings them back); then
# deletes kube-proxy's DaemonSets, runs `kube-proxy --cleanup` on each Linux
# node it ran on and deletes kube-proxy's ConfigMap. Idempotent: with
# kube-proxy already gone it only says so.
set -eu
log() { echo "takeover: $*"; }
deadline=$(( $(date +%s) + TIMEOUT ))
kpns="$KP_NAMESPACE"

# backup_json KIND NAME: the object as it can be created again (apiVersion,
# kind, name, namespace, labels, and its spec or data), as one JSON line.
backup_json() {
  jp() { kubectl -n "$kpns" get "$1" "$2" -o jsonpath="$3"; }
  av=$(jp "$1" "$2" '{.apiVersion}'); kind=$(jp "$1" "$2" '{.kind}')
  labels=$(jp "$1" "$2" '{.metadata.labels}'); [ -n "$labels" ] || labels='{}'
  if [ "$1" = configmap ]; then field=data; else field=spec; fi
  body=$(jp "$1" "$2" "{.$field}"); [ -n "$body" ] || body='{}'
  printf '{"apiVersion":"%s","kind":"%s","metadata":{"name":"%s","namespace":"%s","labels":%s},"%s":%s}\n' \
    "$av" "$kind" "$2" "$kpns" "$labels" "$field" "$body"
}

# 0. Keep kube-proxy's objects before anything is deleted. An existing backup
# is never overwritten: it was taken from the objects as they were before the
# first takeover (restore.sh deletes it once kube-proxy is back).
dir=/tmp/crossproxy-$$; mkdir -p "$dir"
kept=""
kubectl -n "$XP_NAMESPACE" get configmap "$BACKUP" >/dev/null 2>&1 && has_backup=1 || has_backup=""
[ -z "$has_backup" ] || log "ConfigMap $XP_NAMESPACE/$BACKUP holds kube-proxy's objects from before: kept as it is"
[ -n "$has_backup" ] || for pair in "daemonset:$KP_DAEMONSET:daemonset-linux.json" "daemonset:$KP_WINDOWS_DAEMONSET:daemonset-windows.json" \
    "configmap:$KP_CONFIGMAP:configmap.json"; do
  kind=${pair%%:*}; rest=${pair#*:}; name=${rest%%:*}; file=${rest#*:}
  if [ -n "$name" ] && kubectl -n "$kpns" get "$kind" "$name" >/dev/null 2>&1; then
    backup_json "$kind" "$name" > "$dir/$file"
    kept="$kept --from-file=$file=$dir/$file"
    names="${names:-} $kind/$name"
  fi
done
if [ -n "$kept" ]; then
  # shellcheck disable=SC2086
  kubectl -n "$XP_NAMESPACE" create configmap "$BACKUP" $kept >/dev/null
  kubectl -n "$XP_NAMESPACE" label configmap "$BACKUP" app.kubernetes.io/name=crossproxy app.kubernetes.io/component=kube-proxy-backup --overwrite >/dev/null
  log "kept kube-proxy's objects in ConfigMap $XP_NAMESPACE/$BACKUP:$names"
fi

if ! kubectl -n "$kpns" get daemonset "$KP_DAEMONSET" >/dev/null 2>&1 && \
   ! kubectl -n "$kpns" get daemonset "$KP_WINDOWS_DAEMONSET" >/dev/null 2>&1; then
  log "no DaemonSet $kpns/$KP_DAEMONSET or $kpns/$KP_WINDOWS_DAEMONSET: nothing to take over"
  if kubectl -n "$kpns" get configmap "$KP_CONFIGMAP" >/dev/null 2>&1; then
    kubectl -n "$kpns" delete configmap "$KP_CONFIGMAP"
    log "deleted ConfigMap $kpns/$KP_CONFIGMAP"
  fi
  exit 0
fi
# selector DS: the DaemonSet's pod selector as a label selector.
selector() {
  sel=$(kubectl -n "$kpns" get daemonset "$1" \
    -o go-template='{{range $k, $v := .spec.selector.matchLabels}}{{$k}}={{$v}},{{end}}')
  echo "${sel%,}"
}
# nodes_of DS: the nodes its pods run on.
nodes_of() {
  kubectl -n "$kpns" get pods -l "$(selector "$1")" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u
}
linux_nodes="" windows_nodes="" image=""
if kubectl -n "$kpns" get daemonset "$KP_DAEMONSET" >/dev/null 2>&1; then
  linux_nodes=$(nodes_of "$KP_DAEMONSET")
  image=${KP_CLEANUP_IMAGE:-$(kubectl -n "$kpns" get daemonset "$KP_DAEMONSET" \
    -o jsonpath='{.spec.template.spec.containers[0].image}')}
  log "kube-proxy $kpns/$KP_DAEMONSET (image $image) runs on: $(echo $linux_nodes)"
fi
if kubectl -n "$kpns" get daemonset "$KP_WINDOWS_DAEMONSET" >/dev/null 2>&1; then
  windows_nodes=$(nodes_of "$KP_WINDOWS_DAEMONSET")
  log "kube-proxy $kpns/$KP_WINDOWS_DAEMONSET runs on: $(echo $windows_nodes)"
fi

# 1. crossproxy Ready on each of those nodes (its Linux or Windows pod).
for n in $linux_nodes $windows_nodes; do
  until [ "$(kubectl -n "$XP_NAMESPACE" get pods -l app.kubernetes.io/name=crossproxy \
      --field-selector "spec.nodeName=$n" \
      -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}')" = True ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "crossproxy is not Ready on $n after ${TIMEOUT}s: kube-proxy left as it is"
      exit 1
    fi
    sleep 2
  done
  log "crossproxy Ready on $n"
done

# 2. kube-proxy's DaemonSets, and their pods gone (they leave their rules).
for ds in "$KP_DAEMONSET" "$KP_WINDOWS_DAEMONSET"; do
  kubectl -n "$kpns" get daemonset "$ds" >/dev/null 2>&1 || continue
  sel=$(selector "$ds")
  kubectl -n "$kpns" delete daemonset "$ds" --wait=true
  kubectl -n "$kpns" wait --for=delete pod -l "$sel" --timeout="${TIMEOUT}s" || true
  log "deleted DaemonSet $kpns/$ds"
done
if [ -n "$windows_nodes" ]; then
  log "Windows nodes: kube-proxy's HNS load balancers stay until removed on each node (installer/README.md, Migrating from kube-proxy, step 4); crossproxy reports them as another proxy until then"
fi

# 3. kube-proxy --cleanup on each Linux node: its own removal of its
# iptables, ipvs and nftables rules, from its own image.
failed=""
for n in $linux_nodes; do
  pod="kube-proxy-cleanup-$(echo "$n" | tr -c 'a-z0-9-\n' '-' | cut -c1-40)"
  kubectl -n "$kpns" delete pod "$pod" --ignore-not-found --wait=true >/dev/null
  cat <<YAML | kubectl create -f -
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  namespace: $kpns
  labels: {app.kubernetes.io/name: crossproxy-takeover}
spec:
  nodeName: $n
  hostNetwork: true
  restartPolicy: Never
  ${PRIORITY_CLASS:+priorityClassName: $PRIORITY_CLASS}
  tolerations: [{operator: Exists}]
  containers:
    - name: cleanup
      image: $image
      command: ["kube-proxy", "--cleanup", "--v=2"]
      securityContext: {privileged: true}
      volumeMounts:
        - {name: lib-modules, mountPath: /lib/modules, readOnly: true}
        - {name: xtables-lock, mountPath: /run/xtables.lock}
  volumes:
    - {name: lib-modules, hostPath: {path: /lib/modules}}
    - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
YAML
  phase=""
  until [ "$phase" = Succeeded ] || [ "$phase" = Failed ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then phase=timeout; break; fi
    sleep 2
    phase=$(kubectl -n "$kpns" get pod "$pod" -o jsonpath='{.status.phase}')
  done
  kubectl -n "$kpns" logs "$pod" 2>/dev/null | tail -5 || true
  if [ "$phase" = Succeeded ]; then
    log "kube-proxy --cleanup done on $n"
    kubectl -n "$kpns" delete pod "$pod" --wait=false >/dev/null
  else
    log "kube-proxy --cleanup on $n: $phase (pod $kpns/$pod kept)"
    failed="$failed $n"
  fi
done

# 4. kube-proxy's ConfigMap, so kubeadm upgrade does not re-add the addon.
kubectl -n "$kpns" delete configmap "$KP_CONFIGMAP" --ignore-not-found
log "deleted ConfigMap $kpns/$KP_CONFIGMAP"
if [ -n "$failed" ]; then
  log "cleanup failed on:$failed; run kube-proxy --cleanup there by hand"
  exit 1
fi
log "done: kube-proxy removed from $(echo $linux_nodes $windows_nodes | wc -w) node(s); takeover.restore=true (or helm uninstall) brings it back from $XP_NAMESPACE/$BACKUP"
