package hns

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// CNIConfDirs are where a Windows node's CNI configuration is, in the order
// looked in: C:\etc\cni\net.d, where sig-windows-tools' HostProcess flannel
// writes 10-flannel.conf (hostprocess/flannel/flanneld/start.ps1), Calico's
// HostProcess install writes its own and sig-windows-tools' containerd
// install points containerd (Install-Containerd.ps1); containerd's own
// default; and C:\k\cni\config, Microsoft's SDN scripts' and Calico's
// manual install's layout.
var CNIConfDirs = []string{`C:\etc\cni\net.d`, `C:\Program Files\containerd\cni\conf`, `C:\k\cni\config`}

// CNIBinDirs are where the CNI plugins (host-local) are, after the flag and
// the CNI_PATH the runtime sets: sig-windows-tools' and flannel's
// C:\opt\cni\bin, containerd's default, and C:\k\cni of the older layout.
var CNIBinDirs = []string{`C:\opt\cni\bin`, `C:\Program Files\containerd\cni\bin`, `C:\k\cni`}

// CNIConfig is what crossproxy takes from the node's CNI configuration: the
// CNI network name (the HNS network's, and the key host-local keeps the
// pods' reservations under), the version the runtime speaks, and the IPAM.
type CNIConfig struct {
	// File is the configuration read: the first in name order of the first
	// directory holding one, as containerd loads it.
	File       string
	Name       string
	CNIVersion string
	// Type is the main plugin (flannel, sdnoverlay, win-overlay, win-bridge,
	// sdnbridge, calico).
	Type string
	// IPAMType is the IPAM plugin the pods' addresses come from.
	IPAMType string
	// DataDir is host-local's dataDir ("": host-local's default).
	DataDir string
	// Subnets are the IPAM's ranges (empty when the plugin fills them in at
	// run time, as flannel does from its subnet.env).
	Subnets []netip.Prefix
}

// same reports whether two configurations say the same (nil is none).
func (c *CNIConfig) same(o *CNIConfig) bool {
	if c == nil || o == nil {
		return c == o
	}
	return c.File == o.File && c.Name == o.Name && c.CNIVersion == o.CNIVersion && c.Type == o.Type &&
		c.IPAMType == o.IPAMType && c.DataDir == o.DataDir && slices.Equal(c.Subnets, o.Subnets)
}

// String says what was read, for the log and explain.
func (c *CNIConfig) String() string {
	if c == nil {
		return "none found"
	}
	s := fmt.Sprintf("%s (network %q, type %s, IPAM %s, cniVersion %s", c.File, c.Name, c.Type, c.IPAMType, c.CNIVersion)
	if c.DataDir != "" {
		s += ", dataDir " + c.DataDir
	}
	return s + ")"
}

// IPAM is the IPAM plugin the configuration gives the pods, run from binDirs.
func (c *CNIConfig) IPAM(binDirs []string) CNIIPAM {
	return CNIIPAM{Plugin: c.IPAMType, BinDirs: binDirs, Network: c.Name, DataDir: c.DataDir, CNIVersion: c.CNIVersion}
}

// cniPlugin is the part of a plugin's configuration crossproxy reads.
type cniPlugin struct {
	Name       string `json:"name"`
	CNIVersion string `json:"cniVersion"`
	Type       string `json:"type"`
	IPAM       *struct {
		Type    string `json:"type"`
		DataDir string `json:"dataDir"`
		Subnet  string `json:"subnet"`
		Ranges  [][]struct {
			Subnet string `json:"subnet"`
		} `json:"ranges"`
	} `json:"ipam"`
	// Plugins is set in a .conflist, whose first plugin is the main one.
	Plugins []cniPlugin `json:"plugins"`
}

// ReadCNIConfig reads the node's CNI configuration from the first of dirs
// holding one (.conf, .conflist or .json; the first file in name order, as
// containerd picks it). Files that do not parse are passed over; with none
// found, the error names the directories and what was wrong with each file.
func ReadCNIConfig(dirs []string) (*CNIConfig, error) {
	var problems []error
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				problems = append(problems, fmt.Errorf("read CNI configuration directory %s: %w", dir, err))
			}
			continue
		}
		var files []string
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".conf" || ext == ".conflist" || ext == ".json") {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
		slices.Sort(files)
		for _, f := range files {
			c, err := parseCNIConfig(f)
			if err != nil {
				problems = append(problems, err)
				continue
			}
			return c, nil
		}
	}
	return nil, errors.Join(append([]error{fmt.Errorf("no CNI configuration in %s: %w", strings.Join(dirs, ", "), ErrNotFound)}, problems...)...)
}

// parseCNIConfig reads one configuration file.
func parseCNIConfig(file string) (*CNIConfig, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CNI configuration: %w", err)
	}
	var top cniPlugin
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("CNI configuration %s: %w", file, err)
	}
	main := top
	if len(top.Plugins) > 0 {
		main = top.Plugins[0]
	}
	if top.Name == "" || main.Type == "" {
		return nil, fmt.Errorf("CNI configuration %s: no network name or plugin type", file)
	}
	c := &CNIConfig{File: file, Name: top.Name, CNIVersion: top.CNIVersion, Type: main.Type}
	switch {
	case main.IPAM != nil && main.IPAM.Type != "":
		c.IPAMType, c.DataDir = main.IPAM.Type, main.IPAM.DataDir
		var subnets []string
		if main.IPAM.Subnet != "" {
			subnets = append(subnets, main.IPAM.Subnet)
		}
		for _, set := range main.IPAM.Ranges {
			for _, r := range set {
				subnets = append(subnets, r.Subnet)
			}
		}
		for _, s := range subnets {
			// Calico's "usePodCidr" and the like are filled in at run time.
			if p, err := netip.ParsePrefix(s); err == nil {
				c.Subnets = append(c.Subnets, p.Masked())
			}
		}
	case main.Type == "flannel":
		// flannel's CNI plugin gives its delegate (sdnoverlay, win-bridge)
		// host-local with the node's subnet from subnet.env, under the
		// configuration's name and host-local's default dataDir
		// (flannel-io/cni-plugin, flannel_windows.go).
		c.IPAMType = defaultIPAMPlugin
	}
	return c, nil
}
