package platform

import (
	"fmt"
	"syscall"
	"time"
)

// processCPU is the process's user plus kernel CPU time: what a storm of
// syncs costs the node, which the wall clock of a busy machine does not say.
func processCPU() (time.Duration, error) {
	h, err := syscall.GetCurrentProcess()
	if err != nil {
		return 0, fmt.Errorf("current process: %w", err)
	}
	var created, exited, kernel, user syscall.Filetime
	if err := syscall.GetProcessTimes(h, &created, &exited, &kernel, &user); err != nil {
		return 0, fmt.Errorf("process times: %w", err)
	}
	// Durations in 100 ns units (Filetime.Nanoseconds is for dates: it
	// subtracts the 1601 epoch).
	ticks := func(f syscall.Filetime) time.Duration {
		return time.Duration(uint64(f.HighDateTime)<<32|uint64(f.LowDateTime)) * 100
	}
	return ticks(kernel) + ticks(user), nil
}
