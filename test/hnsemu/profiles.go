package hnsemu

import (
	"fmt"
	"sort"
)

// Profile is how one Windows Server release's HNS behaves where a proxy can
// tell. The releases and every knob are those of crossproxy's backend
// tests, platform_windows/profiles_test.go (ws2019, ws2022, ws2025,
// ws2025u), where each is cited; the HNS version string is what
// /globals/version answers, from which hcn (and so crossproxy and
// kube-proxy) derive their features.
type Profile struct {
	Name    string  `json:"name"`
	Version Version `json:"version"`
	// ModifyKeepsEndpoints: HcnModifyLoadBalancer succeeds and HNS keeps
	// the old endpoint list (HNS 15.4, kubernetes #131466).
	ModifyKeepsEndpoints bool `json:"modifyKeepsEndpoints"`
	// RehydrateAfterRestart: after a restart HNS restores the load
	// balancers under new ids (kubernetes #139519); else they, the remote
	// endpoints and every endpoint no CNI made are gone (kubernetes #110849,
	// #135802).
	RehydrateAfterRestart bool `json:"rehydrateAfterRestart"`
	// HideV1Endpoints: endpoints a CNI made through the V1 API are missing
	// from V2 listings (kubernetes #110591); V1 GET /endpoints/ shows them.
	HideV1Endpoints bool `json:"hideV1Endpoints"`
}

// Profiles are the releases, as platform_windows/profiles_test.go has them.
// Versions: 10.2 for Server 2019 (assumed there; a 2019 node reports 9.5 in
// kubernetes #137530), 13.2 for Server 2022 (assumed there), 15.4 for
// Server 2025 as shipped (kubernetes #131466), 15.5 for a patched 2025
// (microsoft/hnslib ae833b3).
var Profiles = map[string]Profile{
	"ws2019":      {Name: "ws2019", Version: Version{10, 2}, HideV1Endpoints: true},
	"ws2022":      {Name: "ws2022", Version: Version{13, 2}, RehydrateAfterRestart: true, HideV1Endpoints: true},
	"ws2025":      {Name: "ws2025", Version: Version{15, 4}, ModifyKeepsEndpoints: true, RehydrateAfterRestart: true, HideV1Endpoints: true},
	"ws2025-15.5": {Name: "ws2025-15.5", Version: Version{15, 5}, RehydrateAfterRestart: true, HideV1Endpoints: true},
}

// DefaultProfile is the profile of a node nobody configured.
const DefaultProfile = "ws2022"

// profileNamed returns a profile by name.
func profileNamed(name string) (Profile, error) {
	if name == "" {
		name = DefaultProfile
	}
	p, ok := Profiles[name]
	if !ok {
		names := make([]string, 0, len(Profiles))
		for n := range Profiles {
			names = append(names, n)
		}
		sort.Strings(names)
		return Profile{}, fmt.Errorf("unknown profile %q (have %v)", name, names)
	}
	return p, nil
}
