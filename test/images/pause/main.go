// Command pause is the pod sandbox's process for the test cluster (containerd's
// sandbox_image): it holds the pod's namespaces open, reaps the zombies that
// end up as its children, and exits on SIGINT or SIGTERM. A static Go binary,
// so the image is built here instead of pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
