# A node's whole life as shipped (issue 37), test/cluster/lifecycle_test.go.
#   make test-lifecycle  on a cluster whose pods resolve names as kubeadm's
#                        do (cluster DNS a Service ClusterIP, 10.203.0.10;
#                        the nodes' own resolver 10.201.0.1, which knows the
#                        API server's DNS name): TestReboot (a node rebooted
#                        serves again within 10 s with apiServer.host a DNS
#                        name, and does not with the old dnsPolicy),
#                        TestUninstall, TestRestore (takeover.restore under
#                        traffic). Figures: test/results/lifecycle.md.
# Not in make test: TestUninstall runs there already (test-cluster); the
# reboot and the restore need their own cluster settings and add minutes.

.PHONY: test-lifecycle
test-lifecycle: image manifests cluster-bin
	XPC_CLUSTER_DNS=10.203.0.10 XPC_NODE_DNS=10.201.0.1 \
	  CLUSTER_TEST_RUN="$${CLUSTER_TEST_RUN:-TestReboot|TestUninstall|TestRestore}" \
	  CLUSTER_GO_TIMEOUT=25m timeout 30m bash test/cluster/run-test.sh '$(VERSION)' '$(IMAGE)'
