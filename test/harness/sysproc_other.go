//go:build !linux

package harness

import "syscall"

// childAttr has nothing to add where the kernel cannot tie a child's life to
// its parent's.
func childAttr() *syscall.SysProcAttr { return nil }

// spawn starts a child; only Linux needs a dedicated thread for it.
func spawn(start func() error) error { return start() }
