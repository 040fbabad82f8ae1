package manager

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/httpapi"
	"github.com/vigil-storage/vigil/settings"
)

// nodeObjects is the nodes view from what the Kubernetes API says (the Ready
// condition and Vigil's taint), until the controller's verdicts and the
// datapath's heartbeats and grants are wired in as a richer NodesSource.
type nodeObjects struct {
	informer cache.SharedIndexInformer
	lister   listerscorev1.NodeLister
}

func newNodeObjects(factory informers.SharedInformerFactory) (*nodeObjects, error) {
	inf := factory.Core().V1().Nodes()
	return &nodeObjects{informer: inf.Informer(), lister: inf.Lister()}, nil
}

func (k *nodeObjects) onChange(f func()) error {
	_, err := k.informer.AddEventHandler(changeHandler(f))
	return err
}

// Nodes lists every Node, by name.
func (k *nodeObjects) Nodes(context.Context) ([]httpapi.NodeView, error) {
	if !k.informer.HasSynced() {
		return nil, fmt.Errorf("the Node cache has not synced yet: %w", httpapi.ErrUnavailable)
	}
	nodes, err := k.lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]httpapi.NodeView, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, nodeViewOf(n))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// nodeViewOf reads a Node: its Ready condition gives the verdict (ready,
// not-ready, unknown) and since when; Vigil's taint says tainted.
func nodeViewOf(n *corev1.Node) httpapi.NodeView {
	v := httpapi.NodeView{Name: n.Name, Verdict: "unknown", Reason: "no Ready condition",
		Unschedulable: n.Spec.Unschedulable, Volumes: []httpapi.VolumeGrant{}, Source: "kubernetes"}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		v.Reason = "Ready=" + string(c.Status)
		switch c.Status {
		case corev1.ConditionTrue:
			v.Verdict = "ready"
		case corev1.ConditionFalse:
			v.Verdict = "not-ready"
		}
		if !c.LastTransitionTime.IsZero() {
			t := c.LastTransitionTime.UTC()
			v.Since = &t
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == vigil.FencedTaintKey {
			v.Tainted = true
		}
		if t.Key == vigil.OutOfServiceTaintKey {
			v.Reason += ", out-of-service"
		}
	}
	return v
}

// recoveryInformer reads NodeRecovery objects through an informer.
type recoveryInformer struct {
	informer cache.SharedIndexInformer
}

// recoveryResync: the recoveries are watched; no periodic resync is needed.
const recoveryResync = 0 * time.Second

func newRecoveryInformer(c *v1alpha1.Client) *recoveryInformer {
	return &recoveryInformer{informer: v1alpha1.NewInformer(c, recoveryResync)}
}

func (r *recoveryInformer) onChange(f func()) error {
	_, err := r.informer.AddEventHandler(changeHandler(f))
	return err
}

// run runs the informer until ctx ends.
func (r *recoveryInformer) run(ctx context.Context) { r.informer.RunWithContext(ctx) }

var errRecoveriesNotSynced = errors.New("the NodeRecovery cache has not synced: is the CRD installed? (kubectl apply -f deploy/crds/)")

// Recoveries lists every record.
func (r *recoveryInformer) Recoveries(context.Context) ([]v1alpha1.NodeRecovery, error) {
	if !r.informer.HasSynced() {
		return nil, fmt.Errorf("%w: %w", errRecoveriesNotSynced, httpapi.ErrUnavailable)
	}
	items := r.informer.GetStore().List()
	out := make([]v1alpha1.NodeRecovery, 0, len(items))
	for _, it := range items {
		if nr, ok := it.(*v1alpha1.NodeRecovery); ok {
			out = append(out, *nr.DeepCopy())
		}
	}
	return out, nil
}

// Recovery returns one record.
func (r *recoveryInformer) Recovery(_ context.Context, name string) (*v1alpha1.NodeRecovery, error) {
	if !r.informer.HasSynced() {
		return nil, fmt.Errorf("%w: %w", errRecoveriesNotSynced, httpapi.ErrUnavailable)
	}
	it, ok, err := r.informer.GetStore().GetByKey(name)
	if err != nil {
		return nil, err
	}
	nr, isRecovery := it.(*v1alpha1.NodeRecovery)
	if !ok || !isRecovery {
		return nil, fmt.Errorf("noderecovery %q: %w", name, httpapi.ErrNotFound)
	}
	return nr.DeepCopy(), nil
}

func changeHandler(f func()) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f() },
		UpdateFunc: func(any, any) { f() },
		DeleteFunc: func(any) { f() },
	}
}

// settingsBridge gives *settings.Settings the recording writes the API
// consumes. TEMPORARY: package settings is gaining SetAs, ResetAs, SetMany (all or
// none) and History with exactly these signatures (the settings-history work);
// once merged, *settings.Settings is passed to the API directly and this type is
// deleted. Until then the actor is not recorded, History reports that no
// history is kept, and SetMany validates every value before writing any (only a
// store failure part-way could leave some written).
type settingsBridge struct{ *settings.Settings }

func (b settingsBridge) SetAs(ctx context.Context, name, value string, _ httpapi.Actor) error {
	return b.Set(ctx, name, value)
}

func (b settingsBridge) ResetAs(ctx context.Context, name string, _ httpapi.Actor) error {
	return b.Reset(ctx, name)
}

func (b settingsBridge) SetMany(ctx context.Context, values map[string]string, _ httpapi.Actor) error {
	var errs []error
	for name, v := range values {
		if _, err := settings.ParseValue(name, v); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := b.Set(ctx, name, values[name]); err != nil {
			return err
		}
	}
	return nil
}

func (b settingsBridge) History(context.Context, int) ([]httpapi.ChangeRecord, error) {
	return nil, errors.New("this build does not record settings history yet")
}
