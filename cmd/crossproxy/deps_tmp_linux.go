package main

import (
	_ "github.com/google/nftables"
	_ "github.com/ti-mo/conntrack"
	_ "github.com/vishvananda/netns"
	_ "golang.org/x/sys/unix"
)
