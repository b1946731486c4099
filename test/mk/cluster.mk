# The real two-node cluster (issue 11), see test/cluster/README.md.
#   make cluster-bin   kubelet, kube-controller-manager, kube-scheduler and
#                      kubectl from k8s.io/kubernetes v1.37.2 (cached in
#                      ~/.cache/crossproxy/cluster-bin) plus kube-apiserver/etcd
#   make cluster-up    start it (namespaces xpc-cp, xpc-a, xpc-b); enter with
#                      test/cluster/cluster.sh kubectl ...
#   make cluster-down  stop it and remove everything it made
#   make test-cluster  the shipped DaemonSet deployed for real: Services from
#                      both nodes, /healthz, a rolling upgrade under traffic

.PHONY: cluster-bin cluster-up cluster-down test-cluster
# In make test: the shipped DaemonSet on a real cluster (3 min warm). A new
# machine first builds the kube binary (cached outside the clone).
TEST_SUITES += test-cluster
cluster-bin: apiserver
	bash test/cluster/build.sh

cluster-up: cluster-bin
	bash test/cluster/cluster.sh up

cluster-down:
	bash test/cluster/cluster.sh down

# make test runs the DaemonSet, the Helm install and upgrade, the uninstall
# (issue 37: clean nodes after helm uninstall and kubectl delete -f, none
# lost in a rolling restart), and the takeover from kube-proxy; the alerts against a real Prometheus (about 3
# minutes more) run with make test-cluster-prometheus, or with
# CLUSTER_TEST_RUN=. for everything.
test-cluster: image manifests cluster-bin
	CLUSTER_TEST_RUN="$${CLUSTER_TEST_RUN:-TestDaemonSet|TestHelm|TestUninstall|TestStatus|TestRelease|TestTakeover}" timeout 25m bash test/cluster/run-test.sh '$(VERSION)' '$(IMAGE)'

.PHONY: test-cluster-prometheus
test-cluster-prometheus: image manifests cluster-bin
	CLUSTER_TEST_RUN=TestPrometheus timeout 25m bash test/cluster/run-test.sh '$(VERSION)' '$(IMAGE)'
