package hns

// The HNS behaviour profiles the layout matrix runs against, one per
// Windows Server release. Each knob names its public source; what no public
// source shows is marked assumed.
//
// Features are what crossproxy detects on the release, from HNS' version
// and hcsshim v0.15.0's version table (hcn/hcnglobals.go: V2 API and remote
// subnets 9.2+, DSR 9.3+ in 9.x and 10.2+, IPv6 dual-stack 11.10+, session
// affinity 12.0+, ModifyLoadbalancer 15.4+). HNS' versions per release are
// not published as a table: 9.x/10.x for Server 2019 (a Server 2019 node
// reports HNS 9.5 in kubernetes #137530), 13.x for Server 2022 (assumed:
// hcsshim's 13.x features, SetPolicy 13.0 and L4WfpProxy 13.2, are the ones
// 2022 brought), 15.4 for Server 2025 (kubernetes #131466: "HNS version
// 15.4 ... Windows Server 2025").

// ws2019 is Windows Server 2019: no modify, no session affinity, no IPv6.
var ws2019 = Profile{
	Name: "ws2019", Version: "10.2 (assumed; 9.5 reported in kubernetes #137530)",
	Features: Features{APIV2: true, DSR: true, RemoteSubnet: true},
	// Assumed: no public report of a Server 2019 HNS restoring load
	// balancers after a restart; kubernetes #110849 and #135802 describe
	// objects lost.
	RehydrateAfterRestart: false,
	// hcsshim's listing opens each enumerated id in turn: client-side, the
	// same on every release.
	ListFailsOnConcurrentDelete: true,
	// kubernetes #110591: ListEndpointsOfNetwork misses V1-created
	// endpoints (seen on AKS nodes of that time).
	HideV1Endpoints: true,
}

// ws2022 is Windows Server 2022: session affinity and IPv6, no modify.
var ws2022 = Profile{
	Name: "ws2022", Version: "13.2 (assumed)",
	Features: Features{APIV2: true, DSR: true, RemoteSubnet: true, IPv6DualStack: true, SessionAffinity: true},
	// kubernetes #139519: HNS restores load balancers after a restart, and
	// a create on a restored frontend then fails with 0xb7.
	RehydrateAfterRestart:       true,
	ListFailsOnConcurrentDelete: true,
	HideV1Endpoints:             true,
}

// ws2025 is Windows Server 2025 as first shipped, HNS 15.4: modify is
// reported by a version table that includes 15.4 (hcsshim v0.15.0's, which
// crossproxy used until issue 48) and keeps the old endpoints (kubernetes
// #131466; kube-proxy moved to hnslib's 15.5+/16.0+ table in #131506).
// crossproxy's own table (hcn_windows.go) no longer reports modify on
// 15.4; the profile keeps it reported so the read-back check that guards
// any other build doing the same is what the matrix proves.
var ws2025 = Profile{
	Name: "ws2025", Version: "15.4",
	Features:                    AllFeatures(),
	ModifyKeepsEndpoints:        true,
	RehydrateAfterRestart:       true,
	ListFailsOnConcurrentDelete: true,
	HideV1Endpoints:             true,
}

// ws2025u is Windows Server 2025 with HNS 15.5 or later, where modify
// applies (hnslib's table, microsoft/hnslib commits ae833b3 and 1fbf93f).
var ws2025u = Profile{
	Name: "ws2025-15.5", Version: "15.5",
	Features:                    AllFeatures(),
	RehydrateAfterRestart:       true,
	ListFailsOnConcurrentDelete: true,
	HideV1Endpoints:             true,
}

var profiles = []Profile{ws2019, ws2022, ws2025, ws2025u}
