# restore.sh: run by the crossproxy-restore Job (sh, kubectl), before an
# upgrade with takeover.restore=true and before helm uninstall of a release
# with takeover.enabled. Brings kube-proxy back from the ConfigMap $BACKUP
# that takeover.sh wrote (its ConfigMap first, then its DaemonSets) and waits
# until every kube-proxy pod is Ready. Only then does Helm delete crossproxy's
# DaemonSets, whose cleanup-on-delete containers remove crossproxy's rules
# from each node: both proxies program the nodes for a moment, never neither.
# Without a backup there is nothing to restore: while crossproxy's
# DaemonSets still run and RESTORE_REQUIRED is set (takeover.restore), that
# fails the upgrade, which would otherwise leave the nodes with no proxy;
# otherwise (an uninstall, or after the restore) it is said and Helm goes on.
set -eu
log() { echo "restore: $*"; }
if ! kubectl -n "$XP_NAMESPACE" get configmap "$BACKUP" >/dev/null 2>&1; then
  if [ -n "${RESTORE_REQUIRED:-}" ] && kubectl -n "$XP_NAMESPACE" get daemonset crossproxy-linux crossproxy-windows >/dev/null 2>&1; then
    log "no ConfigMap $XP_NAMESPACE/$BACKUP: this release never took over from kube-proxy (or restored it already); nothing to bring back, so crossproxy stays"
    exit 1
  fi
  log "no ConfigMap $XP_NAMESPACE/$BACKUP: no kube-proxy to bring back"
  exit 0
fi
dir=/tmp/crossproxy-$$; mkdir -p "$dir"
for file in configmap.json daemonset-linux.json daemonset-windows.json; do
  key=$(echo "$file" | sed 's/\./\\./g')
  kubectl -n "$XP_NAMESPACE" get configmap "$BACKUP" -o jsonpath="{.data.$key}" > "$dir/$file"
  if [ -s "$dir/$file" ]; then
    kubectl apply -f "$dir/$file"
  else
    rm -f "$dir/$file"
  fi
done
for file in daemonset-linux.json daemonset-windows.json; do
  [ -f "$dir/$file" ] || continue
  name=$(kubectl create --dry-run=client -f "$dir/$file" -o jsonpath='{.metadata.name}')
  ns=$(kubectl create --dry-run=client -f "$dir/$file" -o jsonpath='{.metadata.namespace}')
  log "waiting for DaemonSet $ns/$name to be Ready on every node it schedules to"
  if ! kubectl -n "$ns" rollout status daemonset "$name" --timeout="${TIMEOUT}s"; then
    log "kube-proxy $ns/$name is not Ready after ${TIMEOUT}s: crossproxy stays (both proxies run); fix kube-proxy, then run again"
    exit 1
  fi
  log "kube-proxy $ns/$name Ready"
done
# kubeadm's kube-proxy DaemonSet has no readiness probe: Ready means its
# container started, not that its rules are in place. Its first sync writes
# them in one transaction, about a second at a few hundred Services; give it
# SETTLE seconds (takeover.restoreSettleSeconds) before crossproxy's go.
log "giving kube-proxy ${SETTLE:-15}s for its first sync"
sleep "${SETTLE:-15}"
kubectl -n "$XP_NAMESPACE" delete configmap "$BACKUP"
log "done: kube-proxy is back and Ready; crossproxy's DaemonSets go next, and their pods remove crossproxy's rules"
