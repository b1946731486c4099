package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// commit is stamped by the Makefile (-X main.commit=...) next to version, so
// a binary built outside git (from a source archive) still names its commit;
// when it is empty the Go toolchain's own VCS stamp is used.
var commit = ""

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version and platform",
		Long: "Print the version (a release's vX.Y.Z, vX.Y.Z-N-gHASH after it, dev without a release tag), " +
			"the commit it was built from, the Go version and the platform.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeVersion(cmd.OutOrStdout(), buildCommit())
		},
	}
}

// writeVersion prints the first line scripts and the image test read
// ("crossproxy VERSION OS/ARCH"), then the commit and the Go version, which a
// bug report needs to rebuild the same binary.
func writeVersion(w io.Writer, rev string) error {
	_, err := fmt.Fprintf(w, "crossproxy %s %s/%s\ncommit: %s\ngo: %s\n",
		version, runtime.GOOS, runtime.GOARCH, rev, runtime.Version())
	return err
}

// buildCommit is the stamped commit, else the toolchain's vcs.revision (with
// "-dirty" when the tree had changes), else "unknown" (go run, a test binary).
func buildCommit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
