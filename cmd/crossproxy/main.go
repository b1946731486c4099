// Command crossproxy is a Kubernetes Service proxy for mixed-OS clusters: one
// shared core decides Service semantics, nftables (Linux) or HNS (Windows)
// expresses them. Each subcommand lives in its own cmd_*.go file;
// newRootCommand lists them.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is stamped by the Makefile from git (-X main.version=...).
var version = "dev"

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "crossproxy",
		Short:         "Kubernetes Service proxy for Linux (nftables) and Windows (HNS) nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.AddCommand(newRunCommand(), newStateCommand(), newRenderCommand(), newExplainCommand(),
		newCleanupCommand(), newCleanupOnDeleteCommand(), newVersionCommand(), newStatusCommand(), newBundleCommand())
	root.AddCommand(platformCommands()...)
	return root
}

func main() {
	if err := runMain(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "crossproxy:", err)
		os.Exit(exitCode(err))
	}
}

// runMain runs the command line; split from main so tests can call it and
// platforms (the Windows service) can wrap it.
func runMain(args []string) error {
	root := newRootCommand()
	root.SetArgs(args)
	return root.Execute()
}

// exitError carries a specific exit status (explain exits 1 on a mismatch).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	if e, ok := err.(*exitError); ok {
		return e.code
	}
	return 2
}
