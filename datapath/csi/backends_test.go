package csi

import "testing"

// sanityBackends lists the datapaths TestSanity runs against.
func sanityBackends() []sanityBackend {
	return []sanityBackend{
		{name: "fake datapath", start: func(*testing.T) Volumes { return newFakeVolumes() }},
	}
}
