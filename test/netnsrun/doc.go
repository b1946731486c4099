// Package netnsrun runs test code inside a named network namespace (Linux
// only). The end-to-end, integration and benchmark suites all open sockets in
// namespaces they create; this is the one place that switches a thread into one.
package netnsrun
