package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
