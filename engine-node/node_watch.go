package enginenode

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// watchFencedTaint watches this engine's own Node (one object, field-selected)
// and sends on kick whenever the node appears, disappears, or gains or loses
// Vigil's fenced taint, so a cleanup pass starts at once instead of at the next
// periodic pass. Heartbeat-only updates of the node do not kick. The informer
// stops with ctx.
func watchFencedTaint(ctx context.Context, c *FenceCleaner, kick chan<- struct{}) {
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.Node).String()
		}))
	notify := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && n.Name != c.Node {
			return // a fake or a proxy that ignores the field selector
		}
		select {
		case kick <- struct{}{}:
		default: // a pass is already due
		}
	}
	_, err := factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: notify,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if ok1 && ok2 && hasFencedTaint(o) == hasFencedTaint(n) {
				return
			}
			notify(cur)
		},
		DeleteFunc: notify,
	})
	if err != nil {
		c.Log.Warn("cannot watch this node; cleanup runs on its interval only", "err", err)
		return
	}
	factory.Start(ctx.Done())
}
