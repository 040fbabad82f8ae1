package client

import "testing"

// A server's node, once reported, is remembered for when it does not
// answer; a new report replaces it.
func TestLeaders_NodeOf(t *testing.T) {
	var g leaders
	for _, tc := range []struct{ id, node, want string }{
		{"s1", "", ""}, {"s1", "node-1", "node-1"}, {"s1", "", "node-1"}, {"s2", "", ""}, {"s1", "node-9", "node-9"}, {"s1", "", "node-9"},
	} {
		if got := g.nodeOf(tc.id, tc.node); got != tc.want {
			t.Errorf("nodeOf(%q, %q) = %q; want %q", tc.id, tc.node, got, tc.want)
		}
	}
}
