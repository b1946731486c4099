//go:build !linux && !windows

package main

import (
	"fmt"
	"runtime"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/platform"
)

// newBackend reports that this OS has no data plane; state, render and explain
// still work here because they need none.
func newBackend(_ platform.BackendConfig, _ logrus.FieldLogger) (platform.Backend, error) {
	return nil, fmt.Errorf("backend for %s: %w", runtime.GOOS, platform.ErrUnsupported)
}
