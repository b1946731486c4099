package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BuildCrossproxy builds the crossproxy binary of this tree into a new
// temporary directory named by prefix, for the suites that run it as a
// process (test/integration, test/faults) from their TestMain. The caller
// removes dir when its tests are done. The go command inherits the
// environment, so make's GOFLAGS reach the build.
func BuildCrossproxy(prefix string) (binary, dir string, err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", "", fmt.Errorf("build crossproxy: %w", err)
	}
	binary = filepath.Join(dir, "crossproxy")
	build := exec.Command("go", "build", "-o", binary, "github.com/crossproxy/crossproxy/cmd/crossproxy")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("build crossproxy: %w", err)
	}
	return binary, dir, nil
}

// MainWithCrossproxy is the TestMain of a suite that runs crossproxy as a
// process in network namespaces (test/integration, test/faults): it needs
// root, builds the binary into *binary (prefix names its directory), runs
// the tests and removes the build. It does not return.
func MainWithCrossproxy(m *testing.M, suite, prefix string, binary *string) {
	if os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "%s need root (network namespaces)\n", suite)
		os.Exit(1)
	}
	bin, dir, err := BuildCrossproxy(prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*binary = bin
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Terminate asks a child process to end with SIGTERM (crossproxy and
// kube-proxy leave their rules in place then) and kills it when it has not
// ended after 10 s; done is closed once the process has been waited for.
func Terminate(p *os.Process, done <-chan struct{}) {
	select {
	case <-done:
		return
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.Kill()
		<-done
	}
}
