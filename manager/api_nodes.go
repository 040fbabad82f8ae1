package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/fenceapi"
	"github.com/vigil-storage/vigil/httpapi"
)

// nodeVerdicts is what the nodes view reads of the controllers;
// *controller.Controller implements it.
type nodeVerdicts interface {
	NodeStatuses() []controller.NodeStatus
}

// storageView is what the nodes view reads of the fencing back end: the reads
// of controller.FenceBackend (the datapath implements both).
type storageView interface {
	Connectivity(ctx context.Context) (fenceapi.Report, error)
	Grants(ctx context.Context, node string) ([]fenceapi.Grant, error)
}

// serversView is a storageView of several servers that reports them (the
// datapath's fence back end of a group does).
type serversView interface {
	Servers(ctx context.Context) ([]fenceapi.Server, error)
}

// nodeSources are the manager's parts the nodes view is built from.
type nodeSources struct {
	verdicts nodeVerdicts
	leading  func() bool
	storage  storageView // nil: the manager runs without --datapath
}

// Polling of the datapath and the controllers for the nodes view.
const (
	// nodesPollInterval: how often the datapath and the verdicts are read; a
	// change is on the event stream within about this long.
	nodesPollInterval = time.Second
	// nodesPollTimeout bounds one poll (the datapath client has its own
	// timeout per call too).
	nodesPollTimeout = 5 * time.Second
	// grantsInFlight bounds the Grants calls of one poll made at once.
	grantsInFlight = 8
)

// loopNodes is httpapi.NodesSource for vigil-manager run: the controllers'
// verdicts (on the leader), the datapath's heartbeats and grants (polled every
// nodesPollInterval), and the Node objects for taints, cordons and the Ready
// condition. It tells the API when what it shows changed, heartbeat ages
// aside.
type loopNodes struct {
	src      nodeSources
	informer cache.SharedIndexInformer
	nodes    listerscorev1.NodeLister
	pvs      listerscorev1.PersistentVolumeLister
	now      func() time.Time

	mu   sync.Mutex
	last *storagePoll // nil until the first poll, or without a datapath
}

func newLoopNodes(factory informers.SharedInformerFactory, src nodeSources) *loopNodes {
	if src.leading == nil {
		src.leading = func() bool { return false }
	}
	n := factory.Core().V1().Nodes()
	return &loopNodes{src: src, informer: n.Informer(), nodes: n.Lister(),
		pvs: factory.Core().V1().PersistentVolumes().Lister(), now: time.Now}
}

// onChange calls f on every change of a Node object.
func (l *loopNodes) onChange(f func()) error {
	_, err := l.informer.AddEventHandler(changeHandler(f))
	return err
}

// Nodes reports every node at this instant.
func (l *loopNodes) Nodes(context.Context) (httpapi.NodesReport, error) {
	in, err := l.input()
	if err != nil {
		return httpapi.NodesReport{}, err
	}
	return nodesReport(in, l.now()), nil
}

func (l *loopNodes) input() (nodesInput, error) {
	if !l.informer.HasSynced() {
		return nodesInput{}, fmt.Errorf("the Node cache has not synced yet: %w", httpapi.ErrUnavailable)
	}
	nodes, err := l.nodes.List(labels.Everything())
	if err != nil {
		return nodesInput{}, err
	}
	pvs, err := l.pvs.List(labels.Everything())
	if err != nil {
		return nodesInput{}, err
	}
	in := nodesInput{Nodes: nodes, Leading: l.src.leading(), PVs: pvsByHandle(pvs)}
	if in.Leading && l.src.verdicts != nil {
		in.Statuses = l.src.verdicts.NodeStatuses()
	}
	if l.src.storage != nil {
		l.mu.Lock()
		in.Storage = l.last
		l.mu.Unlock()
		if in.Storage == nil {
			in.Storage = &storagePoll{At: l.now(), Err: errNotPolled}
		}
	}
	return in, nil
}

// errNotPolled: the first poll of the datapath has not finished.
var errNotPolled = errors.New("the first poll has not finished yet")

// run polls until ctx ends, calling changed whenever the view changed
// (heartbeat ages aside).
func (l *loopNodes) run(ctx context.Context, changed func()) {
	t := time.NewTicker(nodesPollInterval)
	defer t.Stop()
	last := ""
	for {
		l.poll(ctx)
		if key, ok := l.key(); ok && key != last {
			last = key
			changed()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// key encodes the view without its heartbeat ages; ok is false while there is
// nothing to show yet.
func (l *loopNodes) key() (string, bool) {
	in, err := l.input()
	if err != nil {
		return "", false
	}
	rep := nodesReport(in, l.now())
	for i := range rep.Nodes {
		rep.Nodes[i].HeartbeatAgeSeconds = nil
		if s := rep.Nodes[i].DatapathServer; s != nil {
			s.LastContact = nil
		}
	}
	b, _ := json.Marshal(rep)
	return string(b), true
}

// poll reads the datapath: every node's link, then the rows of every node the
// view shows (the Node objects and the nodes the controllers judge).
func (l *loopNodes) poll(ctx context.Context) {
	if l.src.storage == nil || !l.informer.HasSynced() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, nodesPollTimeout)
	defer cancel()
	p := l.pollStorage(ctx)
	if ctx.Err() != nil && p.Err == nil {
		p.Err = ctx.Err()
	}
	l.mu.Lock()
	l.last = p
	l.mu.Unlock()
}

func (l *loopNodes) pollStorage(ctx context.Context) *storagePoll {
	r, err := l.src.storage.Connectivity(ctx)
	at := l.now()
	if err != nil {
		return &storagePoll{At: at, Err: err}
	}
	p := &storagePoll{At: at, Conn: linkOf(r, at), Grants: map[string][]fenceapi.Grant{}}
	if sv, ok := l.src.storage.(serversView); ok {
		// Only when no server answers does this fail, and then so did
		// Connectivity: the servers are not shown.
		if servers, err := sv.Servers(ctx); err == nil {
			p.Servers = servers
		}
	}
	names := map[string]bool{}
	if nodes, err := l.nodes.List(labels.Everything()); err == nil {
		for _, n := range nodes {
			names[n.Name] = true
		}
	}
	if l.src.leading() && l.src.verdicts != nil {
		for _, st := range l.src.verdicts.NodeStatuses() {
			names[st.Name] = true
		}
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		sem  = make(chan struct{}, grantsInFlight)
	)
	for name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			gs, err := l.src.storage.Grants(ctx, name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			p.Grants[name] = gs
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return &storagePoll{At: at, Err: errs[0]}
	}
	return p
}
