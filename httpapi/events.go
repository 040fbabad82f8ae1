package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Stream limits.
const (
	// MaxStreams bounds concurrent /v1/events clients; one more gets a 503.
	MaxStreams = 256
	// streamBuffer is how many events a client may lag behind before it is
	// dropped (its browser reconnects and reloads what it shows).
	streamBuffer = 64
	// keepAlive is the interval of comment lines that keep proxies from closing
	// an idle stream.
	keepAlive = 15 * time.Second
	// retryMillis is the reconnection delay the stream asks browsers to use.
	retryMillis = 2000
)

// Hub fans events out to every open /v1/events stream. Publish never blocks: a
// client that falls streamBuffer events behind is disconnected.
type Hub struct {
	mu     sync.Mutex
	seq    uint64
	subs   map[chan []byte]struct{}
	closed bool
}

// NewHub returns a hub without subscribers.
func NewHub() *Hub { return &Hub{subs: make(map[chan []byte]struct{})} }

// Publish sends an event of the given name with data as JSON to every stream.
func (h *Hub) Publish(name string, data any) {
	body, err := json.Marshal(data)
	if err != nil {
		body, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.seq++
	frame := []byte(fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", h.seq, name, body))
	for ch := range h.subs {
		select {
		case ch <- frame:
		default: // too slow: drop it; the client reconnects
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// Close ends every stream.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		close(ch)
	}
	h.subs = nil
}

// subscribe returns a stream's channel, or false when MaxStreams are open.
func (h *Hub) subscribe() (chan []byte, func(), bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(h.subs) >= MaxStreams {
		return nil, nil, false
	}
	ch := make(chan []byte, streamBuffer)
	h.subs[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}, true
}

// Streams is the number of open streams.
func (h *Hub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// serveEvents is GET /v1/events.
func (a *API) serveEvents(w http.ResponseWriter, r *http.Request) {
	if !a.readable(w, r) {
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, apiError(http.StatusInternalServerError, CodeInternal, "this connection cannot stream"))
		return
	}
	ch, cancel, ok := a.hub.subscribe()
	if !ok {
		writeError(w, apiError(http.StatusServiceUnavailable, CodeUnavailable, "%d event streams are open already; close one", MaxStreams))
		return
	}
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	hello, _ := json.Marshal(map[string]string{"etag": a.svc.Settings().ETag})
	fmt.Fprintf(w, "retry: %s\nevent: %s\ndata: %s\n\n", strconv.Itoa(retryMillis), EventHello, hello)
	fl.Flush()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case frame, open := <-ch:
			if !open {
				return
			}
			if _, err := w.Write(frame); err != nil {
				return
			}
			fl.Flush()
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-r.Context().Done():
			return
		}
	}
}
