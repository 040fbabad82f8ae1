package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/deploy/deploytest"
)

// The engine DaemonSet is the one place that needs the host: it mounts. The
// fd keeper shares a socket with it through a hostPath.
const (
	engineDaemonSet = "DaemonSet/vigil-engine-node"
	keeperDaemonSet = "DaemonSet/vigil-fd-keeper"
	keeper          = keeperDaemonSet + "/fd-keeper"
)

// Deliberate exceptions to the container rules, each with its reason.
var (
	// privileged: mount(2), loop devices, /dev/fuse and Bidirectional propagation.
	privilegedContainers = map[string]bool{engineDaemonSet + "/engine": true}
	// root: the engine (see above); the fd keeper serves the engine on a
	// root-owned socket, and drops every capability.
	rootContainers = map[string]bool{engineDaemonSet + "/engine": true, keeper: true}
	// no memory limit: an OOM kill of the engine or the fd keeper breaks every
	// volume on its node.
	noMemoryLimit = map[string]bool{engineDaemonSet + "/engine": true, keeper: true}
	// no liveness probe: the kubelet restarting the fd keeper would end every
	// FUSE connection it holds; a Job's container runs to its end and serves
	// nothing.
	noLiveness = map[string]bool{keeper: true, "Job/vigil-certs/certs": true}
	// readiness matters where a Service or the rollout waits for it.
	needReadiness = map[string]bool{"Deployment/vigil-manager/manager": true,
		"StatefulSet/vigil-datapath/datapath": true, engineDaemonSet + "/engine": true}
)

// TestWorkloads_Containers_SecurityResourcesProbes: every container has
// resource requests, a memory limit, a restrictive securityContext and a
// liveness probe, with the exceptions above and no others.
func TestWorkloads_Containers_SecurityResourcesProbes(t *testing.T) {
	objs := build(t, "base")
	ws, err := deploytest.Workloads(objs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 6 {
		t.Errorf("%d workloads, want 6 (manager, datapath, CSI controller, engine, fd keeper, the certificates Job)", len(ws))
	}
	for _, w := range ws {
		for _, err := range checkPod(w, objs) {
			t.Error(err)
		}
	}
}

// checkPod returns every way w breaks the rules of TestWorkloads_Containers….
func checkPod(w deploytest.Workload, objs []*unstructured.Unstructured) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	id := w.Kind + "/" + w.Name
	spec := w.Spec
	if spec.ServiceAccountName == "" || deploytest.Find(objs, "ServiceAccount", spec.ServiceAccountName) == nil {
		bad("%s: serviceAccountName %q is not a ServiceAccount of the manifests", id, spec.ServiceAccountName)
	}
	if spec.PriorityClassName == "" || deploytest.Find(objs, "PriorityClass", spec.PriorityClassName) == nil {
		bad("%s: priorityClassName %q is not a PriorityClass of the manifests", id, spec.PriorityClassName)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		bad("%s: the pod needs seccompProfile RuntimeDefault", id)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && id != engineDaemonSet && id != keeperDaemonSet {
			bad("%s: hostPath volume %s; only the engine and its fd keeper may reach into the host", id, v.Name)
		}
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		bad("%s: host namespaces are not needed", id)
	}
	for _, c := range spec.Containers {
		errs = append(errs, checkContainer(w, c)...)
	}
	return errs
}

func checkContainer(w deploytest.Workload, c corev1.Container) []error {
	var errs []error
	cid := w.Kind + "/" + w.Name + "/" + c.Name
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(cid+": "+format, args...)) }
	req := c.Resources.Requests
	if req.Cpu().IsZero() || req.Memory().IsZero() {
		bad("needs cpu and memory requests")
	}
	if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || lim.Cmp(resource.MustParse("0")) <= 0 {
		if !noMemoryLimit[cid] {
			bad("needs a memory limit")
		}
	} else if noMemoryLimit[cid] {
		bad("has a memory limit although it must not (see noMemoryLimit)")
	}
	sc := c.SecurityContext
	if sc == nil {
		bad("no securityContext")
		return errs
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		bad("needs readOnlyRootFilesystem")
	}
	privileged := sc.Privileged != nil && *sc.Privileged
	switch {
	case privileged && !privilegedContainers[cid]:
		bad("privileged; only the engine may be")
	case !privileged:
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad("needs allowPrivilegeEscalation: false")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			bad("needs capabilities drop [ALL] and nothing added")
		}
	}
	user := c.SecurityContext.RunAsUser
	nonRoot := c.SecurityContext.RunAsNonRoot
	if w.Spec.SecurityContext != nil {
		if user == nil {
			user = w.Spec.SecurityContext.RunAsUser
		}
		if nonRoot == nil {
			nonRoot = w.Spec.SecurityContext.RunAsNonRoot
		}
	}
	root := user == nil || *user == 0
	if root && !rootContainers[cid] {
		bad("runs as root; set runAsUser (the image's user is 65532) and runAsNonRoot")
	}
	if !root && (nonRoot == nil || !*nonRoot) {
		bad("needs runAsNonRoot: true")
	}
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		need  bool
	}{{"livenessProbe", c.LivenessProbe, !noLiveness[cid]}, {"readinessProbe", c.ReadinessProbe, needReadiness[cid]}} {
		if p.what == "livenessProbe" && noLiveness[cid] && p.probe != nil {
			bad("has a livenessProbe although it must not (see noLiveness)")
		}
		if p.probe == nil {
			if p.need {
				bad("needs a %s", p.what)
			}
			continue
		}
		if err := probeServed(c, p.probe); err != nil {
			bad("%s: %v", p.what, err)
		}
	}
	// A CSI server answers its liveness probe with the CSI Probe of its own
	// socket (there is no livenessprobe sidecar).
	if _, ok := flagValues(c)["csi-endpoint"]; ok && !noLiveness[cid] &&
		(c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != vigil.CSIProbePath) {
		bad("serves CSI, so its livenessProbe must GET %s (the CSI Probe of its socket)", vigil.CSIProbePath)
	}
	for _, m := range c.VolumeMounts {
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional && !privilegedContainers[cid] {
			bad("Bidirectional propagation on %s needs a privileged container", m.MountPath)
		}
	}
	return errs
}

// probeServed checks that the probe's port is one container c declares and
// that c itself is told to serve on it (--listen, --metrics-address,
// --health-address or --http-endpoint ending in :PORT): no container probes
// through a neighbour.
func probeServed(c corev1.Container, p *corev1.Probe) error {
	var port intstr.IntOrString
	switch {
	case p.HTTPGet != nil:
		port = p.HTTPGet.Port
	case p.TCPSocket != nil:
		port = p.TCPSocket.Port
	default:
		return fmt.Errorf("want an httpGet or tcpSocket probe")
	}
	num := port.IntValue()
	if port.Type == intstr.String {
		num = 0
		for _, cp := range c.Ports {
			if cp.Name == port.StrVal {
				num = int(cp.ContainerPort)
			}
		}
		if num == 0 {
			return fmt.Errorf("port %q is not a named port of container %s", port.StrVal, c.Name)
		}
	}
	suffix := ":" + strconv.Itoa(num)
	for _, a := range c.Args {
		name, value, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !ok || !slices.Contains([]string{"listen", "metrics-address", "health-address", "http-endpoint"}, name) || !strings.HasSuffix(value, suffix) {
			continue
		}
		// An HTTP probe speaks what the server serves: HTTPS where it
		// has a certificate (the kubelet does not verify it).
		tls := flagValues(c)["tls-cert-file"] != "" && name == "listen"
		if p.HTTPGet != nil && (p.HTTPGet.Scheme == corev1.URISchemeHTTPS) != tls {
			return fmt.Errorf("probe scheme %q on port %d, but the server there serves TLS: %v", p.HTTPGet.Scheme, num, tls)
		}
		return nil
	}
	return fmt.Errorf("container %s does not serve port %d", c.Name, num)
}

func TestCheckPod_BadInput(t *testing.T) {
	objs := build(t, "base")
	ws, err := deploytest.Workloads(objs)
	if err != nil {
		t.Fatal(err)
	}
	var mgr deploytest.Workload
	for _, w := range ws {
		if w.Name == "vigil-manager" {
			mgr = w
		}
	}
	if errs := checkPod(mgr, objs); len(errs) > 0 {
		t.Fatalf("the manager as shipped: %v", errs)
	}
	for name, breakIt := range map[string]func(s *corev1.PodSpec){
		"privileged":       func(s *corev1.PodSpec) { yes := true; s.Containers[0].SecurityContext.Privileged = &yes },
		"no memory limit":  func(s *corev1.PodSpec) { delete(s.Containers[0].Resources.Limits, corev1.ResourceMemory) },
		"no requests":      func(s *corev1.PodSpec) { s.Containers[0].Resources.Requests = nil },
		"root":             func(s *corev1.PodSpec) { zero := int64(0); s.SecurityContext.RunAsUser = &zero },
		"hostPath":         func(s *corev1.PodSpec) { s.Volumes = append(s.Volumes, hostPathVolume("/etc")) },
		"no readiness":     func(s *corev1.PodSpec) { s.Containers[0].ReadinessProbe = nil },
		"probe on nothing": func(s *corev1.PodSpec) { s.Containers[0].LivenessProbe.HTTPGet.Port = intstr.FromInt32(1234) },
		"probe through a neighbour": func(s *corev1.PodSpec) {
			s.Containers = append(s.Containers, corev1.Container{Name: "neighbour", Args: []string{"--http-endpoint=:1234"}})
			s.Containers[0].Ports = append(s.Containers[0].Ports, corev1.ContainerPort{Name: "n", ContainerPort: 1234})
			s.Containers[0].LivenessProbe.HTTPGet.Port, s.Containers[0].LivenessProbe.HTTPGet.Scheme = intstr.FromString("n"), corev1.URISchemeHTTP
		},
		"unknown SA":        func(s *corev1.PodSpec) { s.ServiceAccountName = "default" },
		"capabilities kept": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.Capabilities = nil },
	} {
		w := deploytest.Workload{Kind: mgr.Kind, Name: mgr.Name, Spec: *mgr.Spec.DeepCopy()}
		breakIt(&w.Spec)
		if errs := checkPod(w, objs); len(errs) == 0 {
			t.Errorf("%s: not noticed", name)
		}
	}
}

func hostPathVolume(p string) corev1.Volume {
	return corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p}}}
}

// builtHere are the images deploy/ may run: those `make image` builds on this
// machine without a container engine (sandbox/images): Vigil's own and the two
// CSI sidecars built from their modules. The upstream node-driver-registrar
// and livenessprobe are not among them (the module proxy refuses their
// modules): the engine registers with the kubelet and the Vigil containers
// answer their liveness probes themselves.
var builtHere = []string{"vigil", "csi-provisioner", "csi-attacher"}

// TestKustomization_Images_OnePlace: the manifests name images by the short
// names of the base's images: list, which holds exactly the images built here,
// and every image of a build is one of its entries (or an overlay's
// replacement of one), with a tag. The sidecars the sandbox builds run at the
// sandbox's pinned versions.
func TestKustomization_Images_OnePlace(t *testing.T) {
	base := imagesOf(t, "base")
	if got := slices.Sorted(maps.Keys(base)); !slices.Equal(got, slices.Sorted(slices.Values(builtHere))) {
		t.Errorf("images: %v, want exactly the images built here %v", got, builtHere)
	}
	pins := readFile(t, "sandbox/tools/pins.env")
	for img, pin := range map[string]string{"csi-provisioner": "EXTERNAL_PROVISIONER_VERSION", "csi-attacher": "EXTERNAL_ATTACHER_VERSION"} {
		_, tag, _ := strings.Cut(base[img], ":")
		if !strings.Contains(pins, "\n"+pin+"="+tag+"\n") {
			t.Errorf("images: %s is %s, but sandbox/tools/pins.env does not say %s=%s (the sandbox tests another version)", img, base[img], pin, tag)
		}
	}
	for _, dir := range kustomizations {
		want := maps.Clone(base)
		if dir != "base" && dir != "." {
			// An overlay's entry replaces the image the base's entry produced.
			for name, full := range imagesOf(t, dir) {
				replaced := false
				for short, b := range want {
					if strings.Split(b, ":")[0] == name {
						want[short], replaced = full, true
					}
				}
				if !replaced {
					t.Errorf("%s: images: %s replaces nothing; name the image as the base produces it (newName of an entry)", dir, name)
				}
			}
		}
		ws, err := deploytest.Workloads(build(t, dir))
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, w := range ws {
			for _, c := range append(w.Spec.InitContainers, w.Spec.Containers...) {
				ok := false
				for name, full := range want {
					if c.Image == full {
						ok, used[name] = true, true
					}
				}
				if !ok {
					t.Errorf("%s: %s/%s: image %q is not from an images: list", dir, w.Name, c.Name, c.Image)
				}
			}
		}
		for name := range want {
			if !used[name] {
				t.Errorf("%s: images: %s is used by no container", dir, name)
			}
		}
	}
	// The raw manifests use the short names only, so images: is the one place.
	for _, w := range rawWorkloads(t) {
		for _, c := range append(w.Spec.InitContainers, w.Spec.Containers...) {
			if _, ok := base[c.Image]; !ok {
				t.Errorf("deploy/base: %s/%s names image %q; use one of the short names of images: %v",
					w.Name, c.Name, c.Image, slices.Sorted(maps.Keys(base)))
			}
		}
	}
}

// imagesOf reads the images: list of dir's kustomization.yaml: short name ->
// newName:newTag.
func imagesOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	var k struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join("deploy", dir, "kustomization.yaml"))), &k); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, im := range k.Images {
		if im.NewName == "" || im.NewTag == "" {
			t.Errorf("%s: images: %s needs newName and newTag", dir, im.Name)
		}
		out[im.Name] = im.NewName + ":" + im.NewTag
	}
	return out
}

// rawWorkloads are the workloads of deploy/base's files as written, before
// kustomize.
func rawWorkloads(t *testing.T) []deploytest.Workload {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deploytest.Dir(), "base", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if m != nil {
				objs = append(objs, &unstructured.Unstructured{Object: m})
			}
		}
	}
	ws, err := deploytest.Workloads(objs)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}
