// Package e2enet is Kubernetes' own e2e suite restricted to the network
// tests (k8s.io/kubernetes/test/e2e/network), built as a test binary with
// `go test -c -tags conformance` by build-e2e.sh. Linking only the network
// package and the framework keeps the binary and its build a fraction of the
// full e2e.test; conformance.sh runs it against crossproxy and kube-proxy on
// the two-node test cluster. The glue replaces upstream's e2e_test.go and
// e2e.go: the same flags and framework setup, without the other SIGs' specs.
package e2enet
