// Package cluster holds the test cluster's harness (cluster.sh) and its
// tests, which run only with the build tag cluster through
// `make test-cluster`: they need root, network namespaces and the cluster's
// binaries (build.sh).
package cluster
