package hns

import (
	"fmt"
	"net/netip"
)

// The node layouts the matrix runs, each taken from the code or the
// documentation of the product that builds it, cited part by part. The
// addresses are the test's; the shapes (names, types, which endpoints are
// remote, made through V1 or V2, their MACs and provider addresses, what
// exists at boot) are the products'.
//
// Common to all: this node win-1 has 192.168.0.11 (the management IP HNS
// reports) and host MAC 00-15-5d-00-00-11; a Linux node has 192.168.0.12;
// a node that joins later has 192.168.0.13.

// layout is one CNI's node as HNS holds it, and what crossproxy must make of it.
type layout struct {
	name string
	// network is the CNI's network once it exists.
	network Network
	// external is the network the node's boot scripts make before the
	// CNI's (nil: none).
	external *Network
	// cni is the node's CNI configuration, as written when the CNI is
	// installed (after boot, before its network exists).
	cni *CNIConfig
	// host is the host endpoint the CNI or its node agent makes with the
	// network (nil: none), hostV1 whether through HNS' V1 API.
	host   *Endpoint
	hostV1 bool
	// podMAC is the MAC the CNI gives a pod's endpoint, podPA whether the
	// pod's endpoint carries a provider address policy (the node's IP).
	podMAC func(netip.Addr) string
	podPA  bool
	// nodePodCIDR is the Node's spec.podCIDRs (kube-controller-manager's);
	// pods are the CNI's pod subnet on this node: localPod, movePod (a pod
	// address that moves here from elsewhere) are in it.
	nodePodCIDR netip.Prefix
	localPod    netip.Addr
	// remotePod is a pod on the Linux node; joiner a node that joins and
	// joinerPod a pod on it.
	remotePod netip.Addr
	joiner    RemoteSubnet
	joinerPod netip.Addr
	// sourceVIP is the source VIP crossproxy must use (overlay), found
	// without reserving one when reserve is false.
	sourceVIP netip.Addr
	reserve   bool
	// refused names why crossproxy must refuse the node ("": it programs it).
	refused string
}

const (
	layoutNodeIP  = "192.168.0.11"
	layoutHostMAC = "00-15-5d-00-00-11"
)

// overlayMAC is the MAC flannel's and Calico's overlay CNIs give a pod:
// 0E-2A and the IPv4 address (flannel-io/cni-plugin and
// containernetworking/plugins win-overlay; projectcalico/calico
// dataplane_windows.go createAndAttachContainerEP, "0E-2A" by default).
func overlayMAC(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("0E-2A-%02x-%02x-%02x-%02x", b[0], b[1], b[2], b[3])
}

// bridgeMAC stands for the MAC HNS assigns a pod on an L2Bridge network
// (win-bridge sends none); any MAC that is not the host's does.
func bridgeMAC(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("00-15-5d-%02x-%02x-%02x", b[1], b[2], b[3])
}

// externalOverlay is the External network of sig-windows-tools' HostProcess
// flannel (kubernetes-sigs/sig-windows-tools hostprocess/flannel setup.ps1:
// New-HNSNetwork -Type Overlay -AddressPrefix 192.168.255.0/30 -Gateway
// 192.168.255.1 -Name External, SubnetPolicies VSID 9999, before flanneld
// starts; flannel issue 1359) and of Calico's VXLAN install
// (projectcalico/calico node/windows-packaging node-service.ps1).
var externalOverlay = Network{ID: "0e7e0000-0000-4000-8000-00000000e7e0", Name: "External", Type: NetworkOverlay,
	Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.255.0/30")}}

// externalL2Bridge is Microsoft SDN's and Calico BGP's External network:
// microsoft/SDN Kubernetes/windows/helper.psm1 CreateExternalNetwork
// (New-HNSNetwork -Type $NetworkType -AddressPrefix 192.168.255.0/30 -Name
// External, done once "as it causes network blip").
var externalL2Bridge = Network{ID: "0e7e0000-0000-4000-8000-00000000e7e1", Name: "External", Type: NetworkL2Bridge,
	Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.255.0/30")}}

func layouts() []layout {
	p := netip.MustParsePrefix
	return []layout{
		{
			// (a) kubernetes-sigs/sig-windows-tools HostProcess flannel, VXLAN.
			// Network: flannel-io/flannel pkg/backend/vxlan/device_windows.go
			// ensureNetwork: an Overlay network named flannel.<VNI> with the
			// node's lease as its Ipams subnet (V2); vxlan_network_windows.go
			// handleSubnetEvents adds a RemoteSubnetRoute per other node's
			// lease, and one for a node that joins. CNI: the kube-flannel.yml
			// ConfigMap cni-conf.json written to C:\etc\cni\net.d\10-flannel.conf
			// (name flannel.4096, cniVersion 0.3.0, flannel delegating to
			// sdnoverlay; flannel-io/cni-plugin flannel_windows.go gives the
			// delegate host-local). No host endpoint on the overlay; the
			// source VIP was reserved by kube-proxy's start script through
			// host-local (container id "dummy"): crossproxy reserves its own.
			name: "sig-windows-tools flannel VXLAN",
			network: Network{ID: "f1a00000-0000-4000-8000-000000004096", Name: "flannel.4096", Type: NetworkOverlay,
				Subnets:       []netip.Prefix{p("10.244.1.0/24")},
				RemoteSubnets: []RemoteSubnet{{Prefix: p("10.244.2.0/24"), ProviderAddress: ip("192.168.0.12")}}},
			external:    &externalOverlay,
			cni:         &CNIConfig{File: `C:\etc\cni\net.d\10-flannel.conf`, Name: "flannel.4096", CNIVersion: "0.3.0", Type: "flannel", IPAMType: "host-local"},
			podMAC:      overlayMAC,
			nodePodCIDR: p("10.244.1.0/24"), localPod: ip("10.244.1.5"),
			remotePod: ip("10.244.2.7"),
			joiner:    RemoteSubnet{Prefix: p("10.244.3.0/24"), ProviderAddress: ip("192.168.0.13")}, joinerPod: ip("10.244.3.9"),
			sourceVIP: ip("10.244.1.2"), reserve: true,
		},
		{
			// (b1) microsoft/SDN Kubernetes/flannel/overlay: helper.psm1
			// CreateExternalNetwork makes External first; flannel then makes
			// vxlan0 (its net-conf.json names it); the CNI configuration is
			// C:\k\cni\config\cni.conf, cniVersion 0.2.0, flannel delegating
			// to win-overlay (start.ps1 Update-CNIConfig).
			name: "Microsoft SDN flannel overlay",
			network: Network{ID: "5d0e0000-0000-4000-8000-0000000000a0", Name: "vxlan0", Type: NetworkOverlay,
				Subnets:       []netip.Prefix{p("10.244.1.0/24")},
				RemoteSubnets: []RemoteSubnet{{Prefix: p("10.244.2.0/24"), ProviderAddress: ip("192.168.0.12")}}},
			external:    &externalOverlay,
			cni:         &CNIConfig{File: `C:\k\cni\config\cni.conf`, Name: "vxlan0", CNIVersion: "0.2.0", Type: "flannel", IPAMType: "host-local"},
			podMAC:      overlayMAC,
			nodePodCIDR: p("10.244.1.0/24"), localPod: ip("10.244.1.5"),
			remotePod: ip("10.244.2.7"),
			joiner:    RemoteSubnet{Prefix: p("10.244.3.0/24"), ProviderAddress: ip("192.168.0.13")}, joinerPod: ip("10.244.3.9"),
			sourceVIP: ip("10.244.1.2"), reserve: true,
		},
		{
			// (b2) microsoft/SDN Kubernetes/flannel/l2bridge: External
			// (L2Bridge, helper.psm1 CreateExternalNetwork) first; flannel's
			// host-gw backend (flannel-io/flannel pkg/backend/hostgw
			// hostgw_windows.go) then makes cbr0 (L2Bridge) and its host
			// endpoint cbr0_ep at the subnet's second address through HNS'
			// V1 API; the CNI configuration is C:\k\cni\config\cni.conf,
			// cniVersion 0.2.0, flannel delegating to win-bridge.
			name:     "Microsoft SDN flannel l2bridge",
			network:  Network{ID: "5d0e0000-0000-4000-8000-0000000000b0", Name: "cbr0", Type: NetworkL2Bridge, Subnets: []netip.Prefix{p("10.244.1.0/24")}},
			external: &externalL2Bridge,
			cni:      &CNIConfig{File: `C:\k\cni\config\cni.conf`, Name: "cbr0", CNIVersion: "0.2.0", Type: "flannel", IPAMType: "host-local"},
			host:     &Endpoint{Name: "cbr0_ep", IP: ip("10.244.1.2"), MAC: layoutHostMAC}, hostV1: true,
			podMAC:      bridgeMAC,
			nodePodCIDR: p("10.244.1.0/24"), localPod: ip("10.244.1.5"),
			remotePod: ip("10.244.2.7"), joinerPod: ip("10.244.3.9"),
		},
		{
			// (c) Calico for Windows, VXLAN (its default):
			// projectcalico/calico node/windows-packaging node-service.ps1
			// makes External (Overlay, VSID 9999) at boot; calico-node's
			// startup (node/pkg/lifecycle/startup/startup_windows.go) and the
			// CNI (cni-plugin/pkg/dataplane/windows/dataplane_windows.go
			// ensureVxlanNetworkExists) make the Overlay network "Calico"
			// through HNS' V1 API (hcsshim.HNSNetworkRequest POST) for the
			// node's IPAM block, gateway .1, VSID 4096; whether a V2 query
			// then reports the block as Ipams is not known, so none is
			// reported here (the worse case). createAndAttachVxlanHostEP
			// makes Calico_ep (networkName + "_ep"): IsRemoteEndpoint true,
			// getNthIP(block, 2), a V1 "PA" policy with the network's
			// management IP and the MAC of the host interface holding it
			// (GetMacAddr: Go's net.HardwareAddr form, colons). Pods
			// (createAndAttachContainerEP): MAC 0E-2A-<ip>, a V2
			// ProviderAddress policy with the management IP. The CNI
			// configuration (node/windows-packaging cni.conf.template):
			// name Calico, type calico, IPAM calico-ipam, "subnet":
			// "usePodCidr"; the Node's podCIDR is not Calico's block.
			name: "Calico VXLAN",
			network: Network{ID: "ca1c0000-0000-4000-8000-0000000000c0", Name: "Calico", Type: NetworkOverlay,
				RemoteSubnets: []RemoteSubnet{{Prefix: p("10.244.46.0/26"), ProviderAddress: ip("192.168.0.12")}}},
			external: &externalOverlay,
			cni:      &CNIConfig{File: `C:\etc\cni\net.d\10-calico.conf`, Name: "Calico", CNIVersion: "0.3.1", Type: "calico", IPAMType: "calico-ipam"},
			host: &Endpoint{Name: "Calico_ep", IP: ip("10.244.45.66"), Remote: true, ProviderAddress: ip(layoutNodeIP),
				MAC: "00:15:5d:00:00:11"}, hostV1: true,
			podMAC: overlayMAC, podPA: true,
			nodePodCIDR: p("10.244.1.0/24"), localPod: ip("10.244.45.70"),
			remotePod: ip("10.244.46.7"),
			joiner:    RemoteSubnet{Prefix: p("10.244.47.0/26"), ProviderAddress: ip("192.168.0.13")}, joinerPod: ip("10.244.47.9"),
			sourceVIP: ip("10.244.45.66"),
		},
		{
			// (d) Calico for Windows, BGP: the network "Calico" is L2Bridge
			// (dataplane_windows.go EnsureNetworkExists, V1, the block as
			// its subnet) and Calico_ep a local host endpoint at the block's
			// second address (CreateAndAttachHostEP, V1, attached to the
			// host); External is L2Bridge (node-service.ps1).
			name:     "Calico BGP",
			network:  Network{ID: "ca1c0000-0000-4000-8000-0000000000d0", Name: "Calico", Type: NetworkL2Bridge, Subnets: []netip.Prefix{p("10.244.45.64/26")}},
			external: &externalL2Bridge,
			cni:      &CNIConfig{File: `C:\etc\cni\net.d\10-calico.conf`, Name: "Calico", CNIVersion: "0.3.1", Type: "calico", IPAMType: "calico-ipam"},
			host:     &Endpoint{Name: "Calico_ep", IP: ip("10.244.45.66"), MAC: layoutHostMAC}, hostV1: true,
			podMAC:      bridgeMAC,
			nodePodCIDR: p("10.244.1.0/24"), localPod: ip("10.244.45.70"),
			remotePod: ip("10.244.46.7"), joinerPod: ip("10.244.47.9"),
		},
		{
			// (e) win-bridge as containernetworking/plugins ships it
			// (plugins/main/windows/win-bridge/sample-v2.conf: name cbr0,
			// flannel delegating to win-bridge with apiVersion 2, so the
			// pods' endpoints are V2) under flannel host-gw (cbr0, cbr0_ep
			// through V1, hostgw_windows.go), written by a HostProcess
			// install to C:\etc\cni\net.d; no External network.
			name:    "win-bridge (flannel host-gw)",
			network: Network{ID: "b41d0000-0000-4000-8000-0000000000e0", Name: "cbr0", Type: NetworkL2Bridge, Subnets: []netip.Prefix{p("10.244.1.0/24")}},
			cni:     &CNIConfig{File: `C:\etc\cni\net.d\10-flannel.conf`, Name: "cbr0", CNIVersion: "0.3.0", Type: "flannel", IPAMType: "host-local"},
			host:    &Endpoint{Name: "cbr0_ep", IP: ip("10.244.1.2"), MAC: layoutHostMAC}, hostV1: true,
			podMAC:      bridgeMAC,
			nodePodCIDR: p("10.244.1.0/24"), localPod: ip("10.244.1.5"),
			remotePod: ip("10.244.2.7"), joinerPod: ip("10.244.3.9"),
		},
		{
			// (f) Antrea: its Windows agent makes the Transparent network
			// antrea-hnsnetwork with the OVS extension (antrea-io/antrea
			// pkg/agent/util LocalHNSNetwork) and forwards Services itself
			// (AntreaProxy): no HNS load balancer is Antrea's data path.
			name:        "Antrea",
			network:     Network{ID: "a47e0000-0000-4000-8000-0000000000f0", Name: "antrea-hnsnetwork", Type: "Transparent", Subnets: []netip.Prefix{p("10.244.1.0/24")}},
			cni:         &CNIConfig{File: `C:\etc\cni\net.d\10-antrea.conflist`, Name: "antrea", CNIVersion: "0.3.0", Type: "antrea", IPAMType: "host-local"},
			podMAC:      bridgeMAC,
			nodePodCIDR: p("10.244.1.0/24"), localPod: ip("10.244.1.5"),
			remotePod: ip("10.244.2.7"), joinerPod: ip("10.244.3.9"),
			refused: "AntreaProxy",
		},
	}
}
