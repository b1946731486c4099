//go:build windows && fakehns

// This file is compiled only with -tags fakehns, as test/wine/service-test.sh
// builds crossproxy.exe: `service install` and `service run` then take the
// hidden --fake-hns-network flag, and the service programs an in-memory HNS.
// The release binaries (make cross, make dist) are built without the tag and
// carry neither the flag nor the fake (realhns_windows.go).

package main

import (
	"os"

	"github.com/spf13/cobra"

	hns "github.com/crossproxy/crossproxy/platform_windows"
)

// fakeHNS, set by `service run --fake-hns-network`, replaces the real HNS:
// the Wine service test runs the real sync loop against the fake this way.
var fakeHNS hns.HNS

// addFakeHNSFlag adds the hidden --fake-hns-network flag to cmd.
func addFakeHNSFlag(cmd *cobra.Command, network *string, usage string) {
	cmd.Flags().StringVar(network, "fake-hns-network", "", "tests only: "+usage)
	_ = cmd.Flags().MarkHidden("fake-hns-network")
}

// fakeHNSArgs passes the flag on from `service install` to `service run`.
func fakeHNSArgs(network string) []string {
	if network == "" {
		return nil
	}
	return []string{"--fake-hns-network", network}
}

// useFakeHNS makes the backend program an in-memory HNS with one L2Bridge
// network of this name (none: the real HNS).
func useFakeHNS(network string) {
	if network != "" {
		fakeHNS = hns.NewFake(hns.Network{Name: network, Type: hns.NetworkL2Bridge}, hns.AllFeatures())
	}
}

// nodeHNS returns the HNS the backend programs and its ledger's file name:
// the fake keeps its own ledger, so a test run never leaves entries a real
// run would read.
//
// `crossproxy run` has no flag for the fake: the test build takes the
// network's name from CROSSPROXY_FAKE_HNS_NETWORK instead, which the Wine
// test of the secure endpoint (test/integration) sets.
func nodeHNS() (hns.HNS, string) {
	if fakeHNS == nil {
		useFakeHNS(os.Getenv("CROSSPROXY_FAKE_HNS_NETWORK"))
	}
	if fakeHNS != nil {
		return fakeHNS, "hns-owned-fake.json"
	}
	return hns.HCN{}, ledgerFile
}
