// Package netnsrun runs test code inside a named network namespace (Linux
// only). The end-to-end, integration and benchmark suites all open sockets in
// namespaces they create; this is the one place that switches a thread into one.
// It also holds what the integration and fault suites share around it: the
// three-namespace lab of a node (Lab) and TCP servers in a namespace
// (ServeTCP).
package netnsrun
