package controller_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/settings"
)

// ExampleNew wires the controller the way vigil-manager run does: one informer
// factory with the cache transform, settings, an event recorder and metrics.
// Run it (normally inside RunAsLeader) after starting the factory.
func ExampleNew() {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithTransform(controller.TransformForCache))
	set, err := settings.New(settings.NewMemoryStore(), "", settings.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Close()
	metrics, err := controller.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		fmt.Println(err)
		return
	}
	ctrl, err := controller.New(controller.Config{
		Client: client, Informers: factory, Settings: set, Metrics: metrics,
		Recorder: record.NewFakeRecorder(10),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	fmt.Println("synced:", ctrl.HasSynced())
	// Output: synced: true
}

// ExampleTransformForCache shows what the informers keep of a node.
func ExampleTransformForCache() {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "a"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Message: "Kubelet stopped posting node status."}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.example.com/app:v1"}, SizeBytes: 1 << 28}},
		},
	}
	obj, _ := controller.TransformForCache(node)
	slim := obj.(*corev1.Node)
	fmt.Println(slim.Name, slim.Labels, len(slim.ManagedFields), len(slim.Status.Images), slim.Status.Conditions[0].Status)
	// Output: node-1 map[] 0 0 Unknown
}
