//go:build e2e && linux

package e2e

import "syscall"

const (
	syscallECONNREFUSED = syscall.ECONNREFUSED
)
