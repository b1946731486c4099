//go:build !windows

package platform

import (
	"fmt"
	"syscall"
	"time"
)

// processCPU is the process's user plus system CPU time: what a storm of
// syncs costs the node, which the wall clock of a busy machine does not say.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
