package main

import (
	"fmt"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform/manifest"
)

// computeFromManifests validates opts, loads the manifests and computes the
// named node's state: what state and render print.
func computeFromManifests(opts core.Options, paths []string, nodeName string) (*core.NodeState, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("core options: %w", err)
	}
	set, err := manifest.Load(paths...)
	if err != nil {
		return nil, err
	}
	node, err := set.Node(nodeName)
	if err != nil {
		return nil, err
	}
	st, err := core.Compute(opts, node, set.Services, set.Slices)
	if err != nil {
		return nil, fmt.Errorf("compute node state: %w", err)
	}
	return st, nil
}
