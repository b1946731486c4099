# takeover.sh: run by the crossproxy-takeover Job (sh, kubectl). Deletes
# nothing until a crossproxy pod is Ready on every node a kube-proxy pod runs
# on; then deletes kube-proxy's DaemonSet, runs `kube-proxy --cleanup` on each
# of those nodes and deletes kube-proxy's ConfigMap. Idempotent: with kube-proxy
# already gone it only says so.
set -eu
log() { echo "takeover: $*"; }
deadline=$(( $(date +%s) + TIMEOUT ))
kpns="$KP_NAMESPACE"
if ! kubectl -n "$kpns" get daemonset "$KP_DAEMONSET" >/dev/null 2>&1; then
  log "no DaemonSet $kpns/$KP_DAEMONSET: nothing to take over"
  if kubectl -n "$kpns" get configmap "$KP_CONFIGMAP" >/dev/null 2>&1; then
    kubectl -n "$kpns" delete configmap "$KP_CONFIGMAP"
    log "deleted ConfigMap $kpns/$KP_CONFIGMAP"
  fi
  exit 0
fi
sel=$(kubectl -n "$kpns" get daemonset "$KP_DAEMONSET" \
  -o go-template='{{range $k, $v := .spec.selector.matchLabels}}{{$k}}={{$v}},{{end}}')
sel=${sel%,}
image=${KP_CLEANUP_IMAGE:-$(kubectl -n "$kpns" get daemonset "$KP_DAEMONSET" \
  -o jsonpath='{.spec.template.spec.containers[0].image}')}
nodes=$(kubectl -n "$kpns" get pods -l "$sel" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u)
log "kube-proxy ($sel, image $image) runs on: $(echo $nodes)"

# 1. crossproxy Ready on each of those nodes.
for n in $nodes; do
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

# 2. kube-proxy's DaemonSet, and its pods gone (they leave their rules).
kubectl -n "$kpns" delete daemonset "$KP_DAEMONSET" --wait=true
kubectl -n "$kpns" wait --for=delete pod -l "$sel" --timeout="${TIMEOUT}s" || true
log "deleted DaemonSet $kpns/$KP_DAEMONSET"

# 3. kube-proxy --cleanup on each node: its own removal of its iptables,
# ipvs and nftables rules, from its own image.
failed=""
for n in $nodes; do
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
log "done: kube-proxy removed from $(echo $nodes | wc -w) node(s)"
