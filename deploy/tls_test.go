package deploy_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/deploy/deploytest"
	"github.com/vigil-storage/vigil/pki"
)

// listenerFlags are the flags with which a container listens.
var listenerFlags = []string{"listen", "metrics-address", "health-address", "http-endpoint", "csi-endpoint"}

// plainListeners may serve plain HTTP off loopback, each with its reason.
var plainListeners = map[string]string{
	"DaemonSet/vigil-engine-node/engine --metrics-address":            "serves /metrics, /healthz and /healthz/csi only: no token, nothing it accepts changes anything",
	"Deployment/vigil-csi-controller/csi --health-address":            "serves /healthz/csi only (the CSI Probe of its own socket): no token, it changes nothing",
	"Deployment/vigil-csi-controller/csi-provisioner --http-endpoint": upstreamHealth,
	"Deployment/vigil-csi-controller/csi-attacher --http-endpoint":    upstreamHealth,
}

const upstreamHealth = "an upstream sidecar's /healthz (and metrics): no token, no TLS option"

// TestWorkloads_Listeners_TLSOrLocal: every listener of every manifest is a
// unix socket, on loopback, or serves TLS with the certificate the Job
// vigil-certs issues for the Service that selects its pod (or is listed in
// plainListeners); every client of the datapath verifies it with the CA
// Secret and never speaks plaintext.
func TestWorkloads_Listeners_TLSOrLocal(t *testing.T) {
	for _, dir := range kustomizations {
		for _, err := range checkTLS(t, build(t, dir)) {
			t.Errorf("%s: %v", dir, err)
		}
	}
}

func checkTLS(t *testing.T, objs []*unstructured.Unstructured) []error {
	t.Helper()
	ws, err := deploytest.Workloads(objs)
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	plan := pki.DefaultPlan(vigil.Namespace)
	secretOf := map[string]string{} // Service -> Secret of its certificate
	for secret, svc := range plan.Services {
		secretOf[svc] = secret
	}
	clients := 0
	for _, w := range ws {
		for _, c := range w.Spec.Containers {
			id := w.Kind + "/" + w.Name + "/" + c.Name
			flags := flagValues(c)
			for _, f := range listenerFlags {
				v, ok := flags[f]
				if !ok || strings.HasPrefix(v, "unix://") || plainListeners[id+" --"+f] != "" {
					continue
				}
				host, _, err := net.SplitHostPort(v)
				if err != nil {
					bad("%s --%s=%s: want host:port", id, f, v)
					continue
				}
				if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
					continue
				}
				svc := serviceOf(t, objs, w)
				want := "secret:" + secretOf[svc]
				cert, key := hostPath(w.Spec, c, flags["tls-cert-file"]), hostPath(w.Spec, c, flags["tls-private-key-file"])
				if secretOf[svc] == "" || cert != want+"/"+pki.KeyCert || key != want+"/"+pki.KeyKey {
					bad("%s --%s=%s: off loopback without the TLS files of the Service %q's certificate (want --tls-cert-file and "+
						"--tls-private-key-file on the Secret %q: got %q, %q)", id, f, v, svc, secretOf[svc], cert, key)
				}
			}
			if _, ok := flags["datapath"]; !ok {
				continue
			}
			clients++
			prefix := "datapath-"
			if got := hostPath(w.Spec, c, flags[prefix+"ca-file"]); got != "secret:"+vigil.CACertSecret+"/"+pki.KeyCA {
				bad("%s: a datapath client without --%sca-file on the Secret %s (key %s): got %q", id, prefix, vigil.CACertSecret, pki.KeyCA, got)
			}
			if _, ok := flags[prefix+"insecure"]; ok {
				bad("%s: --%sinsecure: a datapath client speaks TLS", id, prefix)
			}
		}
	}
	if clients != 3 {
		bad("%d datapath clients, want 3 (manager, CSI controller, engine)", clients)
	}
	return errs
}

// serviceOf is the name of the Service that selects w's pods ("" if none).
func serviceOf(t *testing.T, objs []*unstructured.Unstructured, w deploytest.Workload) string {
	t.Helper()
	var podLabels map[string]string
	o := deploytest.Find(objs, w.Kind, w.Name)
	podLabels, _, _ = unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
	for _, o := range objs {
		if o.GetKind() != "Service" {
			continue
		}
		var svc corev1.Service
		decode(t, objs, "Service", o.GetName(), &svc)
		if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(podLabels)) {
			return svc.Name
		}
	}
	return ""
}

func TestCheckTLS_BadInput(t *testing.T) {
	for name, breakIt := range map[string]func(objs []*unstructured.Unstructured){
		"datapath without TLS": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "StatefulSet", "vigil-datapath", "--tls-cert-file=", "--insecure=true")
		},
		"manager with the datapath's certificate": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "Deployment", "vigil-manager", "--tls-cert-file=", "--tls-cert-file=/var/run/secrets/vigil.io/datapath/token")
		},
		"engine without CA": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "DaemonSet", "vigil-engine-node", "--datapath-ca-file=", "--datapath-insecure=true")
		},
		"CSI controller with a CA from elsewhere": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "Deployment", "vigil-csi-controller", "--datapath-ca-file=", "--datapath-ca-file=/csi/ca.crt")
		},
		"manager in plain HTTP": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "Deployment", "vigil-manager", "--tls-cert-file=", "--insecure-listen=true")
		},
	} {
		objs := build(t, "base")
		breakIt(objs)
		if errs := checkTLS(t, objs); len(errs) == 0 {
			t.Errorf("%s: not noticed", name)
		}
	}
}
