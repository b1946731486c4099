package hnsemu

import "net"

// HostAddress is an IPv4 address of a host interface with a MAC, and that
// MAC (ok false when there is none). Wine shows Windows programs the host's
// own interfaces, and both crossproxy and kube-proxy look up the MAC of the
// interface holding the node's address for the overlay source VIP endpoint,
// so an emulated overlay node's address must be one Wine shows.
func HostAddress() (ip, mac string, ok bool) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", "", false
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 || i.Flags&net.FlagUp == 0 || len(i.HardwareAddr) == 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String(), i.HardwareAddr.String(), true
			}
		}
	}
	return "", "", false
}
