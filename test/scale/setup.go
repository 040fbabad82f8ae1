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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		w.stk, err = w.sb.StartStack(ctx, sandbox.StackConfig{VigilBinDir: vigilBin})
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
	if err := w.timed("workloads created", func() error { return w.workloads(ctx) }); err != nil {
		return w, err
	}
	if err := w.timed(fmt.Sprintf("%d pods Running, %d volumes attached", cfg.Pods, cfg.Protected), func() error {
		return w.awaitRunning(ctx, 60*time.Minute)
	}); err != nil {
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

// workloads creates the StatefulSets of the protected pods (their claims exist)
// and the Deployments of the others.
func (w *world) workloads(ctx context.Context) error {
	grace := int64(30)
	for s := range ssCount(w.cfg.Protected) {
		wl := sandbox.Workload{Namespace: namespace, Name: ssName(s), StorageClass: sandbox.StaticClaimClass, Size: volumeSize,
			TerminationGracePeriodSeconds: &grace}
		set := wl.StatefulSet(int32(replicasOf(s, w.cfg.Protected, ssSize)))
		// Parallel: with OrderedReady the StatefulSet controller recreates a
		// set's reaped pods one at a time, each after the one before is Ready,
		// and "every replacement scheduled" would time that queue rather than
		// the recovery (about 25 of each set's 50 pods are on the failed rack).
		set.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		if _, err := w.c.AppsV1().StatefulSets(namespace).Create(ctx, set, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create StatefulSet %s: %w", ssName(s), err)
		}
	}
	free := w.cfg.Pods - w.cfg.Protected
	for d := 0; d*depSize < free; d++ {
		wl := sandbox.Workload{Namespace: namespace, Name: fmt.Sprintf("web-%03d", d), TerminationGracePeriodSeconds: &grace}
		if _, err := w.c.AppsV1().Deployments(namespace).Create(ctx, wl.Deployment(int32(replicasOf(d, free, depSize))),
			metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Deployment web-%03d: %w", d, err)
		}
	}
	return nil
}

// awaitRunning waits for every pod Running and every protected volume's
// VolumeAttachment attached.
func (w *world) awaitRunning(ctx context.Context, bound time.Duration) error {
	lastLog := time.Now() // progress every 30 s: thousands of attachments take minutes
	return sandbox.Poll(ctx, bound, "pods Running and volumes attached", every(5*time.Second, func(ctx context.Context) (bool, string, error) {
		pods, err := w.c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err.Error(), nil
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		vas, err := w.c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err.Error(), nil
		}
		attached := 0
		for _, va := range vas.Items {
			if va.Status.Attached {
				attached++
			}
		}
		note := fmt.Sprintf("%d of %d pods Running, %d of %d volumes attached", running, w.cfg.Pods, attached, w.cfg.Protected)
		if time.Since(lastLog) >= 30*time.Second {
			lastLog = time.Now()
			w.logf("scale: %s", note)
		}
		return running == w.cfg.Pods && attached == w.cfg.Protected, note, nil
	}), nil)
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
