package harness

import (
	"runtime"
	"sync"
	"syscall"
)

// childAttr makes the kernel kill a child when the test process dies, so a
// crashed test leaves no apiserver behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

var (
	spawnOnce sync.Once
	spawnCh   chan func()
)

// spawn runs start on one OS thread that lives as long as the test process.
// Pdeathsig fires when the thread that forked the child exits, and Go ends
// threads whose goroutine exits while locked (as network-namespace code
// does); forking from a thread that never exits keeps the children alive
// exactly as long as the process.
func spawn(start func() error) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan func())
		go func() {
			runtime.LockOSThread()
			for f := range spawnCh {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnCh <- func() { errc <- start() }
	return <-errc
}
