// Package nft is crossproxy's Linux data plane. It turns a core.NodeState into
// an nftables ruleset model (untagged files, so `crossproxy render --platform
// linux` and the golden tests run on any OS) and, on Linux, programs that model
// into the kernel over netlink with github.com/google/nftables, one atomic batch
// per sync. It owns its tables (inet crossproxy and its shards crossproxy-N)
// and nothing else;
// README.md describes the layout and why it is shaped this way.
package nft
