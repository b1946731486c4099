//go:build !windows

package main

import "github.com/spf13/cobra"

// platformCommands are the subcommands only one OS has: none here (the
// Windows service command is in service_windows.go).
func platformCommands() []*cobra.Command { return nil }
