package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/settings"
)

type sseEvent struct{ name, data string }

// openStream connects to /v1/events and returns its events as they arrive.
func openStream(t *testing.T, f *fixture) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+PathEvents, nil)
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s = %d %s", PathEvents, res.StatusCode, res.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 16)
	go func() {
		defer res.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(res.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.name != "":
				out <- ev
				ev = sseEvent{}
			}
		}
	}()
	return out
}

func next(t *testing.T, events <-chan sseEvent, name string) sseEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("stream ended before a %s event", name)
			}
			if ev.name == name {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event", name)
		}
	}
}

func TestAPI_Events_StreamSettingsChangesFromAnyWriter(t *testing.T) {
	f := newFixture(t, nil, nil)
	events := openStream(t, f)
	hello := next(t, events, EventHello)
	if !strings.Contains(hello.data, `"etag":"\"c1.`) {
		t.Fatalf("hello = %s", hello.data)
	}
	// A writer other than the API (the CLI on the same store).
	if err := f.set.Set(context.Background(), settings.NameDryRun, "true"); err != nil {
		t.Fatal(err)
	}
	ev := next(t, events, EventSettings)
	var got struct {
		Setting SettingView
		ETag    string
	}
	if err := json.Unmarshal([]byte(ev.data), &got); err != nil {
		t.Fatal(err)
	}
	if got.Setting.Name != settings.NameDryRun || got.Setting.Value != "true" || got.ETag != f.api.Service().Settings().ETag {
		t.Fatalf("event = %s", ev.data)
	}
}

func TestAPI_Events_NodesAndRecoveriesWhenTheyChange(t *testing.T) {
	f := newFixture(t, nil, nil)
	events := openStream(t, f)
	next(t, events, EventHello)
	f.api.NodesChanged()
	if ev := next(t, events, EventNodes); !strings.Contains(ev.data, `"name":"node-a"`) {
		t.Fatalf("nodes event = %s", ev.data)
	}
	f.api.RecoveriesChanged()
	if ev := next(t, events, EventRecoveries); !strings.Contains(ev.data, `"timeToRecover":"4.2s"`) {
		t.Fatalf("recoveries event = %s", ev.data)
	}
	// Nothing changed: no second nodes event, so the next one is the settings change.
	f.api.NodesChanged()
	time.Sleep(2 * coalesce) // lets a (wrong) duplicate be published first, if any
	_ = f.set.Set(context.Background(), settings.NameDryRun, "true")
	for ev := range events {
		if ev.name == EventNodes {
			t.Fatal("an unchanged node list was published again")
		}
		if ev.name == EventSettings {
			break
		}
	}
}

func TestHub_Publish_DropsASlowStream(t *testing.T) {
	h := NewHub()
	ch, cancel, ok := h.subscribe()
	if !ok {
		t.Fatal("subscribe refused")
	}
	defer cancel()
	for i := 0; i < streamBuffer+1; i++ {
		h.Publish(EventNodes, i)
	}
	n := 0
	for range ch {
		n++
	}
	if n != streamBuffer || h.Streams() != 0 {
		t.Fatalf("got %d events and %d streams; want %d and the slow stream closed", n, h.Streams(), streamBuffer)
	}
}

func TestHub_Subscribe_RefusesPastMaxStreams(t *testing.T) {
	h := NewHub()
	defer h.Close()
	for i := 0; i < MaxStreams; i++ {
		if _, _, ok := h.subscribe(); !ok {
			t.Fatalf("stream %d refused", i)
		}
	}
	if _, _, ok := h.subscribe(); ok {
		t.Fatal("stream past MaxStreams accepted")
	}
}

// changingNodes is a NodesSource whose report the test changes.
type changingNodes struct {
	mu  sync.Mutex
	rep NodesReport
}

func (c *changingNodes) Nodes(context.Context) (NodesReport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rep := c.rep
	rep.Nodes = append([]NodeView(nil), c.rep.Nodes...)
	return rep, nil
}

func (c *changingNodes) set(f func(*NodesReport)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rep.Nodes = append([]NodeView(nil), c.rep.Nodes...)
	f(&c.rep)
}

// Heartbeat ages move every moment: a report that differs only in them sends
// no event; a real change (a verdict) does.
func TestAPI_Events_NodesIgnoreHeartbeatAges(t *testing.T) {
	age := func(s float64) *float64 { return &s }
	src := &changingNodes{rep: NodesReport{Verdicts: VerdictsController, Datapath: DatapathConnected,
		Nodes: []NodeView{{Name: "node-a", Verdict: VerdictUp, HeartbeatAgeSeconds: age(0.2), Volumes: []VolumeGrant{}}}}}
	f := newFixture(t, nil, func(c *Config) { c.Nodes = src })
	events := openStream(t, f)
	next(t, events, EventHello)
	f.api.NodesChanged()
	next(t, events, EventNodes)
	src.set(func(r *NodesReport) { r.Nodes[0].HeartbeatAgeSeconds = age(0.9) })
	f.api.NodesChanged()
	time.Sleep(2 * coalesce) // lets a (wrong) event for the age be published first, if any
	src.set(func(r *NodesReport) { r.Nodes[0].Verdict, r.Nodes[0].HeartbeatAgeSeconds = VerdictDown, age(7) })
	f.api.NodesChanged()
	ev := next(t, events, EventNodes)
	if !strings.Contains(ev.data, `"verdict":"down"`) {
		t.Fatalf("the first nodes event after the first is %s; want the verdict change (an age alone sends none)", ev.data)
	}
}
