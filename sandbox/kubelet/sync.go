package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
)

// kubelet is the volume manager of one node.
type kubelet struct {
	cfg      Config
	csi      nodeClient
	pods     corelisters.PodLister
	res      resolver
	recorder record.EventRecorder
	log      *slog.Logger

	mu       sync.Mutex
	state    *actualState
	backoff  backoff
	inflight map[string]bool
	stageCap bool
	capKnown bool
	// reported is what the last successful patch put in volumesInUse;
	// statusDirty says the node may say otherwise (start, or a node update).
	reported    []string
	statusDirty bool
	problems    map[string]string // pod uid/volume → message already reported
	lastErr     map[string]string // what → last error logged at Warn
}

// newKubelet loads the actual state under cfg.RootDir; cfg has its defaults.
func newKubelet(cfg Config, client nodeClient, pods corelisters.PodLister, obj objects, rec record.EventRecorder) (*kubelet, error) {
	st, err := loadActual(cfg.RootDir)
	if err != nil {
		return nil, err
	}
	return &kubelet{
		cfg: cfg, csi: client, pods: pods, recorder: rec, log: cfg.Logger.With("node", cfg.NodeName),
		res:   resolver{node: cfg.NodeName, driver: cfg.Driver, obj: obj},
		state: st, backoff: newBackoff(cfg.BackoffInitial, cfg.BackoffMax),
		inflight: map[string]bool{}, statusDirty: true, problems: map[string]string{}, lastErr: map[string]string{},
	}, nil
}

// syncOnce snapshots the pods and the actual state, reports volumesInUse,
// decides and hands each plan to run (inline in tests, a goroutine in Run). It
// returns how many plans it started.
func (k *kubelet) syncOnce(ctx context.Context, run func(plan)) (int, error) {
	pods, err := k.pods.List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("list pods of node %s: %w", k.cfg.NodeName, err)
	}
	desired, probs := k.res.desired(pods)
	k.reportProblems(probs)
	k.mu.Lock()
	actual := k.state.snapshot()
	inflight := maps.Clone(k.inflight)
	k.mu.Unlock()
	// Reported even while the node service is not up yet: after a power cut,
	// what the previous run mounted is in use until it is taken down.
	inUse := volumesInUse(k.cfg.Driver, desired, actual)
	k.warnChanged("status", "cannot report volumesInUse; nothing new is mounted until it is reported", k.reportInUse(ctx, inUse))
	stageCap, err := k.stageCapable(ctx)
	if err != nil {
		return 0, err
	}
	k.mu.Lock()
	reported := map[string]bool{}
	for _, n := range k.reported {
		reported[n] = true
	}
	in := decideInput{
		Root: k.cfg.RootDir, Driver: k.cfg.Driver, Desired: desired, Actual: actual,
		Reported: reported, InFlight: inflight, Stage: stageCap,
		RetryAt: maps.Clone(k.backoff.retryAt), Now: k.cfg.Clock.Now(),
	}
	plans := decide(in)
	for _, p := range plans {
		k.inflight[p.Handle] = true
	}
	k.mu.Unlock()
	for _, p := range plans {
		run(p)
	}
	return len(plans), nil
}

// stageCapable asks the node service once whether it stages volumes.
func (k *kubelet) stageCapable(ctx context.Context) (bool, error) {
	k.mu.Lock()
	known, stage := k.capKnown, k.stageCap
	k.mu.Unlock()
	if known {
		return stage, nil
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.CallTimeout)
	defer cancel()
	resp, err := k.csi.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		return false, fmt.Errorf("NodeGetCapabilities on %s: %w", k.cfg.CSIEndpoint, err)
	}
	for _, c := range resp.GetCapabilities() {
		if c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME {
			stage = true
		}
	}
	k.mu.Lock()
	k.capKnown, k.stageCap = true, stage
	k.mu.Unlock()
	return stage, nil
}

// reportInUse patches node.status.volumesInUse to inUse (a JSON merge patch of
// the status subresource that names no other field, so volumesAttached and
// what kwok reports stay as they are) unless it already says so.
func (k *kubelet) reportInUse(ctx context.Context, inUse []string) error {
	k.mu.Lock()
	same := !k.statusDirty && slices.Equal(inUse, k.reported)
	k.mu.Unlock()
	if same {
		return nil
	}
	var list any // null removes the field, as an empty list would be omitted
	if len(inUse) > 0 {
		list = inUse
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"volumesInUse": list}})
	if err != nil {
		return err
	}
	_, err = k.cfg.Client.CoreV1().Nodes().Patch(ctx, k.cfg.NodeName, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch node %s status.volumesInUse: %w", k.cfg.NodeName, err)
	}
	k.mu.Lock()
	k.reported, k.statusDirty = slices.Clone(inUse), false
	k.mu.Unlock()
	k.log.Debug("reported volumesInUse", "volumes", inUse)
	return nil
}

// nodeChanged marks the status dirty when the node's volumesInUse is not what
// was last reported (kwok or someone else rewrote it).
func (k *kubelet) nodeChanged(node *corev1.Node) bool {
	got := make([]string, 0, len(node.Status.VolumesInUse))
	for _, v := range node.Status.VolumesInUse {
		got = append(got, string(v))
	}
	slices.Sort(got)
	k.mu.Lock()
	defer k.mu.Unlock()
	if !slices.Equal(got, k.reported) {
		k.statusDirty = true
	}
	return k.statusDirty
}

// reportProblems emits one Warning event per new problem (not one per sync)
// and forgets problems that went away.
func (k *kubelet) reportProblems(probs []problem) {
	seen := map[string]bool{}
	for _, p := range probs {
		key := string(p.Pod.UID) + "/" + p.Volume
		seen[key] = true
		k.mu.Lock()
		old, ok := k.problems[key]
		k.problems[key] = p.Msg
		k.mu.Unlock()
		if ok && old == p.Msg {
			continue
		}
		k.log.Warn("pod volume cannot be mounted", "pod", p.Pod.Namespace+"/"+p.Pod.Name, "volume", p.Volume, "problem", p.Msg)
		k.podEvent(p.Pod, corev1.EventTypeWarning, p.Reason, "%s", p.Msg)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for key := range k.problems {
		if !seen[key] {
			delete(k.problems, key)
		}
	}
}

// warnChanged logs err at Warn when it differs from the last one logged for
// what (an unreachable API server or node service fails every poll), at Debug
// otherwise, and notes the recovery.
func (k *kubelet) warnChanged(what, msg string, err error) {
	k.mu.Lock()
	last := k.lastErr[what]
	if err == nil {
		delete(k.lastErr, what)
	} else {
		k.lastErr[what] = err.Error()
	}
	k.mu.Unlock()
	switch {
	case err == nil && last != "":
		k.log.Info("recovered", "what", what, "after", last)
	case err != nil && err.Error() != last:
		k.log.Warn(msg, "err", err)
	case err != nil:
		k.log.Debug(msg, "err", err)
	}
}
