package nft

import (
	"fmt"
	"os"
	"strings"
)

// procSysctl reads and writes /proc/sys from inside the backend's namespace
// (/proc/sys/net is per network namespace, chosen when the file is opened).
type procSysctl struct{ ns *netNS }

func sysctlPath(name string) string { return "/proc/sys/" + strings.ReplaceAll(name, ".", "/") }

func (p procSysctl) Get(name string) (string, error) {
	var out []byte
	err := p.ns.do(func() error {
		var err error
		out, err = os.ReadFile(sysctlPath(name))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", name, err)
	}
	return string(out), nil
}

func (p procSysctl) Set(name, value string) error {
	err := p.ns.do(func() error { return os.WriteFile(sysctlPath(name), []byte(value), 0o644) })
	if err != nil {
		return fmt.Errorf("write sysctl %s: %w", name, err)
	}
	return nil
}
