// Package hns is crossproxy's Windows data plane. It splits planning from
// doing so that everything but the thinnest layer runs and is tested on any OS:
//
//   - the planner (Plan) turns a core.NodeState into plain structs describing
//     HNS load balancers and remote endpoints;
//   - the differ compares that plan with what HNS reports;
//   - the applier makes the fewest HNS calls that close the gap, with bounded
//     concurrency, isolating failures per Service port;
//   - HNS is the interface to the Host Networking Service, in the planner's
//     plain types only; Fake implements it in memory and hcn_windows.go
//     implements it with github.com/Microsoft/hcsshim/hcn.
//
// The package is named hns (not platform_windows) because that is what it
// drives; the directory name keeps the repository layout symmetric with
// platform_linux.
package hns
