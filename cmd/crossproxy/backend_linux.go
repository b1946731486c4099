//go:build linux

package main

import (
	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/platform"
	nft "github.com/crossproxy/crossproxy/platform_linux"
)

// newBackend makes the nftables backend; it programs the kernel over netlink
// and never runs the nft binary.
func newBackend(cfg platform.BackendConfig, log logrus.FieldLogger) (platform.Backend, error) {
	return nft.New(cfg, log)
}
