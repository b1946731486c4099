//go:build windows && !fakehns

package main

import (
	"github.com/spf13/cobra"

	hns "github.com/crossproxy/crossproxy/platform_windows"
)

// The release build: no --fake-hns-network flag and no fake HNS (the test
// build, -tags fakehns, has them: fakehns_windows.go).

func addFakeHNSFlag(*cobra.Command, *string, string) {}
func fakeHNSArgs(string) []string                    { return nil }
func useFakeHNS(string)                              {}

// nodeHNS returns the HNS the backend programs (the host's, through hcn)
// and its ledger's file name.
func nodeHNS() (hns.HNS, string) { return hns.HCN{}, ledgerFile }
