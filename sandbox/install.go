package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/vigil-storage/vigil/deploy"
	"github.com/vigil-storage/vigil/deploy/deploytest"
)

// InstallOverlay is the kustomization of deploy/ that Install applies by
// default: the base adapted to a sandbox of real nodes (its images, no
// cluster DNS, the datapath's disk; its kustomization.yaml says why each).
const InstallOverlay = "overlays/sandbox"

// DefaultInstallTimeout is how long Install waits for every component.
const DefaultInstallTimeout = 5 * time.Minute

// InstallConfig says what Install applies and how long it waits.
type InstallConfig struct {
	// Dir is a kustomization directory to apply (`kubectl apply -k Dir`);
	// empty for deploy/'s InstallOverlay, rendered from the copy built into
	// this program.
	Dir string
	// Timeout bounds the wait for every component; default
	// DefaultInstallTimeout.
	Timeout time.Duration
	// Progressf, when set, gets a line per step and per change of what a
	// component waits on.
	Progressf func(format string, args ...any)
}

// Installed is what Install applied and how long each component took.
type Installed struct {
	// Objects is the number of objects applied.
	Objects int
	// Components are the workloads, in the order they became Ready or
	// Complete, with the time since Install started.
	Components []ComponentReady
	// Took is Install's whole time.
	Took time.Duration
}

// ComponentReady is one workload (Kind/Name) and when it was Ready.
type ComponentReady struct {
	Component string
	After     time.Duration
}

// Install is `kubectl apply -k deploy/` on a sandbox of real nodes: it
// renders cfg's kustomization, checks that every image it runs is imported
// on every node (the sandbox never pulls), creates the directory of each
// local PersistentVolume on its node, applies the namespaces and CRDs, then
// every other object, with server-side apply, and waits until every
// Deployment, StatefulSet and DaemonSet is Ready and every Job Complete. A
// component not ready within the timeout fails Install with its pods'
// conditions and the last Events (InstallError). Only for KubeletReal: kwok
// runs no container.
func (s *Sandbox) Install(ctx context.Context, cfg InstallConfig) (*Installed, error) {
	t0 := time.Now()
	logf := cfg.defaults()
	st, err := loadState(s.workDir)
	if err != nil {
		return nil, err
	}
	if st.Kubelet != KubeletReal {
		return nil, fmt.Errorf("%w: install runs deploy/'s containers, and this sandbox's nodes run kwok, which runs none: bring it up with Kubelet %q (--kubelet real)",
			ErrInvalidConfig, KubeletReal)
	}
	objs, err := RenderDeploy(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := checkImagesImported(st, objs); err != nil {
		return nil, err
	}
	if err := s.prepareLocalVolumes(objs); err != nil {
		return nil, err
	}
	logf("install: applying %d objects of %s", len(objs), installSource(cfg.Dir))
	if err := s.applyAll(ctx, objs); err != nil {
		return nil, err
	}
	logf("install: applied in %.1fs; waiting for every component", time.Since(t0).Seconds())
	ready, err := s.waitInstalled(ctx, objs, cfg.Timeout, t0, logf)
	if err != nil {
		return nil, err
	}
	return &Installed{Objects: len(objs), Components: ready, Took: time.Since(t0)}, nil
}

func installSource(dir string) string {
	if dir == "" {
		return "deploy/" + InstallOverlay
	}
	return dir
}

// RenderDeploy renders the kustomization in dir (`kustomize build dir`), or
// with dir "" deploy/'s InstallOverlay from the copy of deploy/ built into
// this program (deploy.Files).
func RenderDeploy(dir string) ([]*unstructured.Unstructured, error) {
	if dir != "" {
		return deploytest.Build(dir)
	}
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(deploy.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := deploy.Files.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/deploy", p), b)
	})
	if err != nil {
		return nil, fmt.Errorf("render deploy/: %w", err)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, path.Join("/deploy", InstallOverlay))
	if err != nil {
		return nil, fmt.Errorf("render deploy/%s: %w", InstallOverlay, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("render deploy/%s: %s: %w", InstallOverlay, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("render deploy/%s: %s: %w", InstallOverlay, r.CurId(), err)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// ImagesOf lists the images the workloads of objs run, each once, sorted.
func ImagesOf(objs []*unstructured.Unstructured) ([]string, error) {
	ws, err := deploytest.Workloads(objs)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range ws {
		for _, c := range append(w.Spec.InitContainers, w.Spec.Containers...) {
			if c.ImagePullPolicy == corev1.PullAlways || strings.HasSuffix(c.Image, ":latest") || !strings.Contains(path.Base(c.Image), ":") {
				return nil, fmt.Errorf("%w: %s %s container %s: image %s would be pulled (policy %q): a sandbox never pulls; give a tag other than latest and the policy IfNotPresent or Never",
					ErrInvalidConfig, w.Kind, w.Name, c.Name, c.Image, c.ImagePullPolicy)
			}
			out = append(out, c.Image)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// checkImagesImported refuses objs when an image they run is not in every
// node's containerd (imported from Config.NodeImages): the sandbox never
// pulls, and the pod would wait forever with ErrImageNeverPull.
func checkImagesImported(st *state, objs []*unstructured.Unstructured) error {
	want, err := ImagesOf(objs)
	if err != nil {
		return err
	}
	for _, n := range st.Nodes {
		if !n.Powered {
			continue
		}
		out, err := exec.Command("ctr", "-a", dirsOf(st, n).socket(), "-n", ContainerdNamespace, "images", "ls", "-q").CombinedOutput()
		if err != nil {
			return fmt.Errorf("images of %s: %v: %s", n.Name, err, lastLines(string(out), 3))
		}
		have := strings.Fields(string(out))
		var missing []string
		for _, img := range want {
			if !slices.Contains(have, img) && !slices.Contains(have, "docker.io/"+img) {
				missing = append(missing, img)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w: %s has not imported %s, which deploy/ runs: build them (`make image`) and give their tarballs to up (--node-image); imported: %s",
				ErrInvalidConfig, n.Name, strings.Join(missing, ", "), strings.Join(have, ", "))
		}
	}
	return nil
}

// prepareLocalVolumes creates the directory of every local
// PersistentVolume of objs on the node its affinity names, as an
// administrator formats a disk before offering it: the kubelet does not
// create a local volume's path.
func (s *Sandbox) prepareLocalVolumes(objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		if o.GetKind() != "PersistentVolume" {
			continue
		}
		var pv corev1.PersistentVolume
		if err := deploytest.Decode(o, &pv); err != nil {
			return err
		}
		if pv.Spec.Local == nil {
			continue
		}
		nodes := localVolumeNodes(&pv)
		if len(nodes) == 0 {
			return fmt.Errorf("%w: PersistentVolume %s: a local volume needs a required node affinity on kubernetes.io/hostname", ErrInvalidConfig, pv.Name)
		}
		for _, node := range nodes {
			dir, err := s.MachineDir(node, pv.Spec.Local.Path)
			if err != nil {
				return fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
			}
		}
	}
	return nil
}

// localVolumeNodes are the nodes a PersistentVolume's required affinity
// names by kubernetes.io/hostname.
func localVolumeNodes(pv *corev1.PersistentVolume) []string {
	var out []string
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	for _, t := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn {
				out = append(out, e.Values...)
			}
		}
	}
	return out
}

// applyAll applies objs with server-side apply (field manager
// vigil-sandbox): the Namespaces and CustomResourceDefinitions first (each
// CRD Established), then the rest in the order kustomize gives.
func (s *Sandbox) applyAll(ctx context.Context, objs []*unstructured.Unstructured) error {
	dc, err := dynamic.NewForConfig(s.rest)
	if err != nil {
		return err
	}
	first := func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition"
	}
	var early, late []*unstructured.Unstructured
	for _, o := range objs {
		if first(o) {
			early = append(early, o)
		} else {
			late = append(late, o)
		}
	}
	for _, batch := range [][]*unstructured.Unstructured{early, late} {
		// A fresh mapping per batch: the second needs the kinds the first's
		// CRDs add.
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(s.client.Discovery()))
		for _, o := range batch {
			if err := applyOne(ctx, dc, mapper, o); err != nil {
				return err
			}
			if o.GetKind() == "CustomResourceDefinition" {
				if err := waitEstablished(ctx, dc.Resource(crdResource), o.GetName()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func applyOne(ctx context.Context, dc dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, o *unstructured.Unstructured) error {
	ri, err := resourceOf(dc, mapper, o)
	if err != nil {
		return fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
	}
	if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManagerSandbox, Force: true}); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// ErrNotInstalled is returned (wrapped in an InstallError) when a
// component is not Ready within InstallConfig.Timeout, or its Job failed.
var ErrNotInstalled = errors.New("install: components not ready")

// defaults sets the timeout when none is given and returns the progress
// function, one that prints nothing when none is given.
func (cfg *InstallConfig) defaults() func(string, ...any) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultInstallTimeout
	}
	if cfg.Progressf == nil {
		return func(string, ...any) {}
	}
	return cfg.Progressf
}
