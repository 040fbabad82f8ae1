package scale

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
)

// Names of the benchmark's sandbox and objects.
const (
	sandboxName   = "scale"
	sandboxSubnet = "10.213.224.0/24"
	namespace     = "scale"
	volumeSize    = "1Mi"
	ssSize        = 50  // pods per StatefulSet
	depSize       = 100 // pods per Deployment
)

// step is one timed step of the setup.
type step struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration"`
}

// world is the benchmark's running cluster.
type world struct {
	cfg   Config
	sb    *sandbox.Sandbox
	stk   *sandbox.Stack
	dp    *dpclient.Client
	c     kubernetes.Interface
	steps []step
	logf  func(string, ...any)
}

// timed runs f as the setup step name and records its duration.
func (w *world) timed(name string, f func() error) error {
	t0 := time.Now()
	err := f()
	w.steps = append(w.steps, step{Name: name, Duration: time.Since(t0)})
	w.logf("scale: %s: %.1fs (%v)", name, time.Since(t0).Seconds(), err)
	return err
}

// setup brings the world up: the sandbox and its stack, the protected volumes
// (datapath volume, PV, pre-bound PVC), the StatefulSets and Deployments, and
// waits for every pod Running and every protected volume attached. On error the
// caller's sandbox.DownWorkDir removes what was made.
func setup(ctx context.Context, cfg Config, workDir, vigilBin string, logf func(string, ...any)) (*world, error) {
	w := &world{cfg: cfg, logf: logf}
	err := w.timed("sandbox up", func() (err error) {
		w.sb, err = sandbox.Up(ctx, sandbox.Config{Name: sandboxName, WorkDir: workDir, Racks: cfg.Racks, RackSize: cfg.RackSize,
			Subnet: sandboxSubnet, AuditLog: true, Logf: logf,
			// Kubernetes' own timings, not the sandbox's shortened ones: a node
			// lease of 10 s is renewed every 2.5 s, which for 500 nodes is 200
			// writes a second before any workload, and a cluster of this size
			// runs the defaults anyway. Vigil's detection (datapath heartbeats)
			// does not depend on them.
			NodeLeaseDurationSeconds: 40, NodeMonitorGracePeriod: 50 * time.Second, NodeMonitorPeriod: 5 * time.Second,
			DefaultTolerationSeconds: 300})
		return err
	})
	if err != nil {
		return w, err
	}
	w.c = w.sb.Client()
	if err := w.timed("stack up", func() (err error) {
		// DatapathServers 0, the host server: a scale sandbox's racks run
		// no servers (CheckDatapathServers refuses any).
		w.stk, err = w.sb.StartStack(ctx, sandbox.StackConfig{VigilBinDir: vigilBin, DatapathServers: 0})
		return err
	}); err != nil {
		return w, err
	}
	if w.dp, err = dpclient.Dial(ctx, w.stk.DatapathAddr, "", dpclient.WithTokenFile(w.stk.TokenFile),
		dpclient.WithCAFile(w.stk.CAFile)); err != nil {
		return w, err
	}
	if err := sandbox.EnsureNamespace(ctx, w.c, namespace); err != nil {
		return w, err
	}
	if err := sandbox.InstallCRDs(ctx, w.sb.RESTConfig()); err != nil {
		return w, err
	}
	if err := w.timed(fmt.Sprintf("%d protected volumes (datapath, PV, PVC)", cfg.Protected), func() error { return w.volumes(ctx) }); err != nil {
		return w, err
	}
	if err := w.timed(fmt.Sprintf("%d pods Running, %d volumes attached (waves of at most %d pods)", cfg.Pods, cfg.Protected, waveSize),
		func() error { return w.rollOut(ctx, 60*time.Minute) }); err != nil {
		return w, err
	}
	return w, nil
}

// ssCount is the number of StatefulSets, and claimName the claim of pod i of
// StatefulSet s (its volumeClaimTemplate "data").
func ssCount(protected int) int { return (protected + ssSize - 1) / ssSize }

func ssName(s int) string { return fmt.Sprintf("db-%03d", s) }

func claimName(s, i int) string { return fmt.Sprintf("data-%s-%d", ssName(s), i) }

// replicasOf is the size of group g of total pods in groups of size.
func replicasOf(g, total, size int) int { return min(size, total-g*size) }

// volumes creates, for each protected pod, a datapath volume, a PV naming it
// and the claim its StatefulSet pod will use, pre-bound to the PV; 16 at once.
func (w *world) volumes(ctx context.Context) error {
	type job struct{ s, i int }
	jobs := make(chan job)
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if failed.Load() != nil {
					continue
				}
				if err := w.volume(ctx, claimName(j.s, j.i)); err != nil {
					failed.Store(&err)
				}
			}
		}()
	}
	for s := range ssCount(w.cfg.Protected) {
		for i := range replicasOf(s, w.cfg.Protected, ssSize) {
			jobs <- job{s, i}
		}
	}
	close(jobs)
	wg.Wait()
	if p := failed.Load(); p != nil {
		return *p
	}
	return sandbox.Poll(ctx, 20*time.Minute, "protected claims Bound", every(2*time.Second, func(ctx context.Context) (bool, string, error) {
		list, err := w.c.CoreV1().PersistentVolumeClaims(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		bound := 0
		for _, pvc := range list.Items {
			if pvc.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		return bound == w.cfg.Protected, fmt.Sprintf("%d of %d Bound", bound, w.cfg.Protected), nil
	}), nil)
}

// volume creates one datapath volume, its PV and its pre-bound claim.
func (w *world) volume(ctx context.Context, claim string) error {
	q := resource.MustParse(volumeSize)
	vol, err := w.dp.CreateVolume(ctx, "scale-"+claim, q.Value(), datapath.AccessRWO)
	if err != nil {
		return fmt.Errorf("datapath volume for %s: %w", claim, err)
	}
	pvName := "pv-" + claim
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: q},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              sandbox.StaticClaimClass,
			ClaimRef:                      &corev1.ObjectReference{Namespace: namespace, Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: vigil.DriverName, VolumeHandle: vol.ID, FSType: "ext4"}}}}
	if _, err := w.c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PV %s: %w", pvName, err)
	}
	class := sandbox.StaticClaimClass
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class, VolumeName: pvName,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q}}}}
	if _, err := w.c.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PVC %s: %w", claim, err)
	}
	return nil
}

// waveSize is how many pods rollOut creates before it waits for them to run.
// Created at once, 20,000 pods reach the rack kwoks faster than they can mark
// them Running; each kwok watches every pod of the cluster, the API server
// closes the watch of a kwok that falls behind, and the kwok's new watch
// replays everything it missed: in the first 500-node runs thousands of pod
// watches were closed that way (apiserver_terminated_watchers_total), the
// API server spent its time replaying them and pods went Running at 2-5 a
// second. In waves the kwoks keep up.
const waveSize = 2000

// workload is one StatefulSet or Deployment of the benchmark.
type workload struct {
	obj       any // *appsv1.StatefulSet or *appsv1.Deployment
	pods      int
	protected bool
}

// workloadList is every workload: the StatefulSets of the protected pods
// (their claims exist), then the Deployments of the others.
func (w *world) workloadList() []workload {
	grace := int64(30)
	var out []workload
	for s := range ssCount(w.cfg.Protected) {
		n := replicasOf(s, w.cfg.Protected, ssSize)
		wl := sandbox.Workload{Namespace: namespace, Name: ssName(s), StorageClass: sandbox.StaticClaimClass, Size: volumeSize,
			TerminationGracePeriodSeconds: &grace}
		set := wl.StatefulSet(int32(n))
		// Parallel: with OrderedReady the StatefulSet controller recreates a
		// set's reaped pods one at a time, each after the one before is Ready,
		// and "every replacement scheduled" would time that queue rather than
		// the recovery (about 25 of each set's 50 pods are on the failed rack).
		set.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		out = append(out, workload{obj: set, pods: n, protected: true})
	}
	free := w.cfg.Pods - w.cfg.Protected
	for d := 0; d*depSize < free; d++ {
		n := replicasOf(d, free, depSize)
		wl := sandbox.Workload{Namespace: namespace, Name: fmt.Sprintf("web-%03d", d), TerminationGracePeriodSeconds: &grace}
		out = append(out, workload{obj: wl.Deployment(int32(n)), pods: n})
	}
	return out
}

// create creates one workload.
func (w *world) create(ctx context.Context, wl workload) error {
	var err error
	switch o := wl.obj.(type) {
	case *appsv1.StatefulSet:
		_, err = w.c.AppsV1().StatefulSets(namespace).Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.Deployment:
		_, err = w.c.AppsV1().Deployments(namespace).Create(ctx, o, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("create workload: %w", err)
	}
	return nil
}

// rollOut creates the workloads in waves of at most waveSize pods, each after
// the pods of the ones before run and their volumes are attached, and returns
// when all of them do (bound in all).
func (w *world) rollOut(ctx context.Context, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	count, err := w.runningCounter(ctx)
	if err != nil {
		return err
	}
	wls := w.workloadList()
	pods, protected, wave := 0, 0, 0
	for i := 0; i < len(wls); {
		wave++
		inWave := 0
		for ; i < len(wls) && (inWave == 0 || inWave+wls[i].pods <= waveSize); i++ {
			if err := w.create(ctx, wls[i]); err != nil {
				return err
			}
			inWave += wls[i].pods
			if wls[i].protected {
				protected += wls[i].pods
			}
		}
		pods += inWave
		t0 := time.Now()
		if err := w.awaitRunning(ctx, count, pods, protected); err != nil {
			return fmt.Errorf("wave %d: %w", wave, err)
		}
		w.logf("scale: wave %d: %d pods Running, %d volumes attached (%.1fs)", wave, pods, protected, time.Since(t0).Seconds())
	}
	return nil
}

// runningCounter starts informers on pods and VolumeAttachments (until ctx
// ends) and returns a function counting the benchmark's Running pods and the
// attached volumes. Informers, not lists: a list of 20,000 pods every few
// seconds cost the API server (and this process) more CPU than the kubelets'
// own updates, on the same two cores.
func (w *world) runningCounter(ctx context.Context) (func() (running, attached int), error) {
	factory := informers.NewSharedInformerFactoryWithOptions(w.c, 0, informers.WithTransform(phaseOnly))
	pods := factory.Core().V1().Pods().Informer()
	vas := factory.Storage().V1().VolumeAttachments().Informer()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer of %v did not sync: %w", typ, ctx.Err())
		}
	}
	return func() (running, attached int) {
		for _, o := range pods.GetStore().List() {
			if p := o.(*corev1.Pod); p.Namespace == namespace && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		for _, o := range vas.GetStore().List() {
			if o.(*storagev1.VolumeAttachment).Status.Attached {
				attached++
			}
		}
		return running, attached
	}, nil
}

// awaitRunning waits until count says pods are Running and protected volumes
// attached, logging progress every 30 s.
func (w *world) awaitRunning(ctx context.Context, count func() (int, int), pods, protected int) error {
	lastLog := time.Now()
	return sandbox.Poll(ctx, time.Hour, "pods Running and volumes attached", every(time.Second, func(context.Context) (bool, string, error) {
		running, attached := count()
		note := fmt.Sprintf("%d of %d pods Running, %d of %d volumes attached", running, pods, attached, protected)
		if time.Since(lastLog) >= 30*time.Second {
			lastLog = time.Now()
			w.logf("scale: %s", note)
		}
		return running >= pods && attached >= protected, note, nil
	}), nil)
}

// phaseOnly keeps of a pod or a VolumeAttachment what awaitRunning counts.
func phaseOnly(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, ResourceVersion: o.ResourceVersion},
			Status: corev1.PodStatus{Phase: o.Status.Phase}}, nil
	case *storagev1.VolumeAttachment:
		return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: o.Name, ResourceVersion: o.ResourceVersion},
			Status: storagev1.VolumeAttachmentStatus{Attached: o.Status.Attached}}, nil
	}
	return obj, nil
}

// every makes a Poll condition that lists thousands of objects run at most once
// per period (Poll asks every 100 ms).
func every(period time.Duration, cond func(ctx context.Context) (bool, string, error)) func(ctx context.Context) (bool, string, error) {
	var last time.Time
	var note string
	return func(ctx context.Context) (bool, string, error) {
		if time.Since(last) < period {
			return false, note, nil
		}
		last = time.Now()
		done, n, err := cond(ctx)
		note = n
		return done, n, err
	}
}

// settingsStore is the manager's bolt settings file in the work directory.
func settingsStore(workDir string) string { return filepath.Join(workDir, "scale-settings.db") }
