package deploy_test

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// kubeletDir is the kubelet's root directory deploy/ assumes
// (deploy/README.md says how to patch another).
const kubeletDir = "/var/lib/kubelet"

// checkRegistration returns every way the engine DaemonSet's pod spec fails
// to register the driver with the kubelet by itself: the engine is the pod's
// only container (no node-driver-registrar, no livenessprobe); it mounts the
// kubelet's directory at its own path with Bidirectional propagation, and
// serves --csi-endpoint under its plugins/ there, so the socket path it
// announces is the kubelet's path; its --kubelet-registration-dir is the
// kubelet's plugins_registry, mounted outside the Bidirectional mounts (a
// mount below one would propagate back to the host).
func checkRegistration(spec corev1.PodSpec) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("DaemonSet/vigil-engine-node: "+format, args...))
	}
	var engine *corev1.Container
	for i, c := range spec.Containers {
		if c.Name == "engine" {
			engine = &spec.Containers[i]
		} else {
			bad("container %s (%s): the engine registers with the kubelet and answers its probes itself; no sidecar", c.Name, c.Image)
		}
	}
	if engine == nil {
		return append(errs, fmt.Errorf("DaemonSet/vigil-engine-node: no container engine"))
	}
	var bidi []string
	for _, m := range engine.VolumeMounts {
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
			bidi = append(bidi, m.MountPath)
		}
	}
	if got := hostPath(spec, *engine, kubeletDir); got != kubeletDir {
		bad("%s in the engine is %q on the host, want the kubelet's own %s", kubeletDir, got, kubeletDir)
	}
	flags := flagValues(*engine)
	sock := strings.TrimPrefix(flags["csi-endpoint"], "unix://")
	if got := hostPath(spec, *engine, sock); got != sock || !strings.HasPrefix(sock, kubeletDir+"/plugins/") {
		bad("--csi-endpoint %q is %q on the host: the engine announces its path to the kubelet, so want the same path, under %s/plugins/",
			flags["csi-endpoint"], got, kubeletDir)
	}
	reg := flags["kubelet-registration-dir"]
	if want := kubeletDir + "/plugins_registry"; reg == "" || hostPath(spec, *engine, reg) != want {
		bad("--kubelet-registration-dir=%q is %q on the host, want the kubelet's %s", reg, hostPath(spec, *engine, reg), want)
	}
	if m := mountOf(*engine, reg); reg != "" {
		for _, b := range bidi {
			if m.MountPath != b && strings.HasPrefix(m.MountPath, strings.TrimSuffix(b, "/")+"/") {
				bad("--kubelet-registration-dir=%s is on the mount %s, below the Bidirectional mount %s: it would propagate back to the host", reg, m.MountPath, b)
			}
		}
	}
	return errs
}

func TestCheckRegistration_BadInput(t *testing.T) {
	var ds appsv1.DaemonSet
	decode(t, build(t, "base"), "DaemonSet", "vigil-engine-node", &ds)
	if errs := checkRegistration(ds.Spec.Template.Spec); len(errs) > 0 {
		t.Fatalf("the engine as shipped: %v", errs)
	}
	engineArgs := func(s *corev1.PodSpec, prefix, arg string) {
		for i, a := range s.Containers[0].Args {
			if strings.HasPrefix(a, prefix) {
				s.Containers[0].Args[i] = arg
				return
			}
		}
		t.Fatalf("the engine has no argument %s…", prefix)
	}
	mount := func(s *corev1.PodSpec, name, path string) {
		for i, m := range s.Containers[0].VolumeMounts {
			if m.Name == name {
				s.Containers[0].VolumeMounts[i].MountPath = path
				return
			}
		}
		t.Fatalf("the engine does not mount %s", name)
	}
	for name, breakIt := range map[string]func(s *corev1.PodSpec){
		"registrar sidecar": func(s *corev1.PodSpec) {
			s.Containers = append(s.Containers, corev1.Container{Name: "node-driver-registrar", Image: "csi-node-driver-registrar"})
		},
		"no registration": func(s *corev1.PodSpec) { engineArgs(s, "--kubelet-registration-dir=", "--kubelet-registration-dir=") },
		"registration dir not mounted": func(s *corev1.PodSpec) {
			engineArgs(s, "--kubelet-registration-dir=", "--kubelet-registration-dir=/plugins_registry")
		},
		"kubelet dir elsewhere in the engine": func(s *corev1.PodSpec) {
			mount(s, "kubelet-dir", "/kubelet")
			engineArgs(s, "--csi-endpoint=", "--csi-endpoint=unix:///kubelet/plugins/driver.vigil.io/csi.sock")
		},
		"socket outside the kubelet's plugins": func(s *corev1.PodSpec) {
			engineArgs(s, "--csi-endpoint=", "--csi-endpoint=unix:///var/lib/vigil/engine-node/csi.sock")
		},
		"registration mount below the Bidirectional one": func(s *corev1.PodSpec) {
			mount(s, "registration-dir", kubeletDir+"/plugins_registry")
			engineArgs(s, "--kubelet-registration-dir=", "--kubelet-registration-dir="+kubeletDir+"/plugins_registry")
		},
	} {
		spec := ds.Spec.Template.Spec.DeepCopy()
		breakIt(spec)
		if errs := checkRegistration(*spec); len(errs) == 0 {
			t.Errorf("%s: not noticed", name)
		}
	}
}
