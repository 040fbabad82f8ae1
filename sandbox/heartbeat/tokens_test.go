package heartbeat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseNodeTokens_Nodes(t *testing.T) {
	got, err := ParseNodeTokens(strings.NewReader("# rack-1\n\nnode n1 tok-one-0123456789\n  node n2 tok-two-0123456789  \n"), "f")
	if err != nil || len(got) != 2 || got["n1"] != "tok-one-0123456789" || got["n2"] != "tok-two-0123456789" {
		t.Errorf("ParseNodeTokens = %v, %v; want n1 and n2 with their tokens", got, err)
	}
}

func TestParseNodeTokens_BadInput(t *testing.T) {
	for name, in := range map[string]string{
		"empty":           "",
		"only comments":   "# nothing\n\n",
		"controller":      "controller tok-0123456789abcdef\n",
		"bare token":      "tok-0123456789abcdef\n",
		"missing token":   "node n1\n",
		"extra field":     "node n1 tok-0123456789abcdef more\n",
		"node twice":      "node n1 tok-0123456789abcdef\nnode n1 tok-fedcba9876543210\n",
		"comma in a name": "node a,b tok-0123456789abcdef\n",
	} {
		got, err := ParseNodeTokens(strings.NewReader(in), "f")
		if !errors.Is(err, ErrBadConfig) || got != nil {
			t.Errorf("%s: ParseNodeTokens = %v, %v; want nothing and ErrBadConfig", name, got, err)
		}
	}
	_, err := ParseNodeTokens(strings.NewReader("node n1 tok-0123456789abcdef\ncontroller tok-fedcba9876543210\n"), "f")
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a controller line 2: %v, want an error naming line 2", err)
	}
}

func TestReadNodeTokens_Missing(t *testing.T) {
	if _, err := ReadNodeTokens(t.TempDir() + "/none"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("ReadNodeTokens of a missing file = %v, want ErrBadConfig", err)
	}
}

func TestPerNode_Heartbeat_EachNodeItsClient(t *testing.T) {
	a, b := &fakeDatapath{seen: map[string]int{}}, &fakeDatapath{seen: map[string]int{}}
	p := PerNode{"a": a, "b": b}
	r := Beat(context.Background(), p, []string{"a", "b", "c"}, time.Second)
	if a.count("a") != 1 || a.count("b") != 0 || b.count("b") != 1 || b.count("a") != 0 {
		t.Errorf("a saw %v, b saw %v; want each node's heartbeat through its own client only", a.seen, b.seen)
	}
	if r.Sent != 2 || r.Failed != 1 || !errors.Is(r.FirstErr, ErrBadConfig) {
		t.Errorf("Beat = %+v; want 2 sent and c refused with ErrBadConfig (no client)", r)
	}
}

func TestNodesOf(t *testing.T) {
	tokens := map[string]string{"b": "x", "a": "y"}
	if got, err := nodesOf("", tokens, "f"); err != nil || strings.Join(got, ",") != "a,b" {
		t.Errorf("nodesOf(\"\") = %v, %v; want every node of the file, sorted", got, err)
	}
	if got, err := nodesOf("b", tokens, "f"); err != nil || strings.Join(got, ",") != "b" {
		t.Errorf("nodesOf(b) = %v, %v; want b", got, err)
	}
	if _, err := nodesOf("a,c", tokens, "f"); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), `"c"`) {
		t.Errorf("nodesOf(a,c) = %v; want ErrBadConfig naming c", err)
	}
}
