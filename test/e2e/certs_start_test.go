package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/deploy/deploytest"
)

// TestCerts_DeployStarts is `kubectl apply -k deploy/` without a kubelet:
// kustomize renders deploy/, the Job vigil-certs' container runs with its
// exact command line against the sandbox's API server as its ServiceAccount,
// its Secrets are written where the pods mount them (under a temporary
// directory), and the datapath and the manager start with exactly the
// rendered arguments, only paths moved under that directory and the two
// listening ports (and the datapath address' port) replaced by free ones,
// each as its own ServiceAccount through the in-cluster configuration. Both
// must serve TLS that verifies with the issued CA for their Service's DNS
// name, and a datapath client given the manifest's --datapath-ca-file
// connects, while one without that CA is refused. The CSI controller's csi
// container starts the same way; its liveness probe answers 200 (the CSI
// Probe reached the datapath), then 503 once the datapath stops.
func TestCerts_DeployStarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clearCertsSecrets(t)
	ensureSettingsConfigMap(ctx, t)
	objs, err := deploytest.Build(deploytest.Dir())
	must(t, err)
	oneDatapathServer(t, objs)
	ws, err := deploytest.Workloads(objs)
	must(t, err)
	pods := map[string]deploytest.Workload{}
	for _, w := range ws {
		w.Spec.Containers[0].Args = expandPodEnv(t, objs, w)
		pods[w.Kind+"/"+w.Name] = w
	}
	bin, err := filepath.Abs(managerBin)
	must(t, err)

	job := pods["Job/vigil-certs"]
	jc := job.Spec.Containers[0]
	out, err := newPodIdentity(ctx, t, job.Spec.ServiceAccountName).command(t, bin, jc.Args...).CombinedOutput()
	if err != nil {
		t.Fatalf("the Job's container: %v\n%s", err, out)
	}
	t.Logf("certs ensure:\n%s", out)

	dpPort, mgrPort := freeTCPPort(t), freeTCPPort(t)
	dpSvc := vigil.DatapathService + "." + vigil.Namespace + ".svc"
	dp := newPodFiles(ctx, t, pods["StatefulSet/vigil-datapath"], map[string]string{":9600": ":" + dpPort, ":9601": ":" + freeTCPPort(t)})
	dpCmd, _ := dp.start(ctx, t, bin)
	mgr := newPodFiles(ctx, t, pods["Deployment/vigil-manager"], map[string]string{":9500": ":" + mgrPort, ":9600": ":" + dpPort})
	waitTLS(t, "127.0.0.1:"+dpPort, dpSvc, mgr.file("--datapath-ca-file"), dpCmd)
	mgrCmd, mgrLog := mgr.start(ctx, t, bin, dpSvc)
	mgrName := vigil.ManagerService + "." + vigil.Namespace + ".svc"
	waitTLS(t, "127.0.0.1:"+mgrPort, mgrName, mgr.file("--datapath-ca-file"), mgrCmd)
	if code, _ := httpsGet(t, "127.0.0.1:"+mgrPort, mgrName, mgr.file("--datapath-ca-file"), "", "/healthz"); code != http.StatusOK {
		t.Errorf("manager /healthz over HTTPS: %d", code)
	}
	// The manager (once leader) reaches the datapath by its Service name over
	// TLS with its --datapath-ca-file: its metric says the datapath answers.
	// Reads off loopback need the shared API token.
	tok, err := os.ReadFile(mgr.file("--api-token-file"))
	must(t, err)
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := httpsGet(t, "127.0.0.1:"+mgrPort, mgrName, mgr.file("--datapath-ca-file"), string(tok), "/metrics")
		if code == http.StatusOK && strings.Contains(body, "\nvigil_datapath_reachable 1\n") {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(mgrLog)
			t.Fatalf("manager: vigil_datapath_reachable not 1 within 60 s (HTTP %d)\n%s", code, b)
		}
		time.Sleep(500 * time.Millisecond)
	}

	csiController := checkCSIControllerLiveness(ctx, t, bin, pods["Deployment/vigil-csi-controller"], dpPort, dpSvc)

	// A datapath client as the manifests configure it: the Service's name,
	// the CA file, a token of the controller role.
	dialer := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", "127.0.0.1:"+dpPort)
	})
	c, err := client.Dial(ctx, dpSvc+":"+dpPort, "", client.WithTokenFile(mgr.file("--datapath-token-file")),
		client.WithCAFile(mgr.file("--datapath-ca-file")), client.WithBulk(false), client.WithDialOptions(dialer), client.WithTimeout(5*time.Second))
	must(t, err)
	defer c.Close()
	if _, err := c.ListVolumes(ctx); err != nil {
		t.Errorf("a datapath client with the manifest's CA: %v", err)
	}
	// Without that CA (the system's roots) the same client is refused.
	c2, err := client.Dial(ctx, dpSvc+":"+dpPort, "", client.WithTokenFile(mgr.file("--datapath-token-file")),
		client.WithRootCAs(x509.NewCertPool()), client.WithBulk(false), client.WithDialOptions(dialer), client.WithTimeout(2*time.Second), client.WithRetries(0))
	if err == nil {
		defer c2.Close()
		if _, err := c2.ListVolumes(ctx); err == nil {
			t.Errorf("a datapath client without the issued CA connected")
		}
	}

	// The CSI controller's liveness endpoint reports a datapath that stops
	// answering: 503 with the reason, so the kubelet would restart it.
	must(t, dpCmd.Process.Signal(os.Interrupt))
	waitProbe(t, csiController, http.StatusServiceUnavailable, "datapath did not answer")
}

// checkCSIControllerLiveness starts the CSI controller pod's csi container
// with its rendered arguments (the socket moved under a temporary directory,
// its health port and the datapath's replaced by free ones) and waits until
// its liveness probe, as the manifest declares it, answers 200: the CSI Probe
// through its socket reached the datapath over TLS as vigil-csi-controller.
// It returns the probe's URL.
func checkCSIControllerLiveness(ctx context.Context, t *testing.T, bin string, w deploytest.Workload, dpPort, dpSvc string) string {
	t.Helper()
	c := w.Spec.Containers[0]
	if c.Name != "csi" || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil {
		t.Fatalf("the CSI controller's first container is %s with liveness probe %v; want csi with an httpGet probe", c.Name, c.LivenessProbe)
	}
	var port int32
	for _, p := range c.Ports {
		if p.Name == c.LivenessProbe.HTTPGet.Port.String() || strconv.Itoa(int(p.ContainerPort)) == c.LivenessProbe.HTTPGet.Port.String() {
			port = p.ContainerPort
		}
	}
	healthPort := freeTCPPort(t)
	pod := newPodFiles(ctx, t, w, map[string]string{":9600": ":" + dpPort, fmt.Sprintf(":%d", port): ":" + healthPort})
	_, logFile := pod.start(ctx, t, bin, dpSvc)
	url := "http://127.0.0.1:" + healthPort + c.LivenessProbe.HTTPGet.Path
	if code, body := waitProbe(t, url, http.StatusOK, "ok"); code != http.StatusOK {
		b, _ := os.ReadFile(logFile)
		t.Fatalf("CSI controller %s: HTTP %d %q\n%s", url, code, body, b)
	}
	return url
}

// waitProbe polls url until it answers code with a body containing want
// (30 s), and returns the last answer.
func waitProbe(t *testing.T, url string, code int, want string) (int, string) {
	t.Helper()
	hc := http.Client{Timeout: 6 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, body := 0, ""
		resp, err := hc.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got, body = resp.StatusCode, string(b)
		} else {
			body = err.Error()
		}
		if got == code && strings.Contains(body, want) {
			return got, body
		}
		if time.Now().After(deadline) {
			t.Errorf("GET %s: HTTP %d %q within 30 s, want %d with %q", url, got, body, code, want)
			return got, body
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// ensureSettingsConfigMap creates the settings ConfigMap of deploy/ if the
// sandbox has none (removed again at the end).
func ensureSettingsConfigMap(ctx context.Context, t *testing.T) {
	t.Helper()
	cms := sb.Client().CoreV1().ConfigMaps(vigil.Namespace)
	_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vigil-settings"}}, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
	case err != nil:
		t.Fatal(err)
	default:
		t.Cleanup(func() { _ = cms.Delete(context.Background(), "vigil-settings", metav1.DeleteOptions{}) })
	}
}

// podFiles is one pod of the manifests laid out under a directory: each
// volume of its first container under root+mountPath (Secrets with their
// keys, projected tokens requested for their audience, the rest empty), its
// arguments with those paths and the given ports moved.
type podFiles struct {
	w    deploytest.Workload
	root string
	args []string
}

// oneDatapathServer makes the rendered datapath one server, its clients
// reaching it through the Service, as overlays/sandbox does: this test runs
// one datapath process, whose group then has one member, and resolves no
// pod's DNS name.
func oneDatapathServer(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	cm := deploytest.Find(objs, "ConfigMap", "vigil-datapath-servers")
	if cm == nil {
		t.Fatal("no ConfigMap vigil-datapath-servers in deploy/")
	}
	peer := "vigil-datapath-0." + vigil.DatapathPeersService + "." + vigil.Namespace + ".svc:9601"
	must(t, unstructured.SetNestedStringMap(cm.Object, map[string]string{
		"servers": vigil.DatapathService + "." + vigil.Namespace + ".svc:9600", "peers": "vigil-datapath-0=" + peer}, "data"))
}

// expandPodEnv is the first container's arguments of w with each $(VAR) of
// its environment expanded as the kubelet does: a value, a key of a
// ConfigMap of objs, the pod's name (a StatefulSet's first pod) or
// namespace.
func expandPodEnv(t *testing.T, objs []*unstructured.Unstructured, w deploytest.Workload) []string {
	t.Helper()
	c := w.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			cm := deploytest.Find(objs, "ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name)
			if cm == nil {
				t.Fatalf("%s: env %s from a ConfigMap %s that deploy/ lacks", w.Name, e.Name, e.ValueFrom.ConfigMapKeyRef.Name)
			}
			env[e.Name], _, _ = unstructured.NestedString(cm.Object, "data", e.ValueFrom.ConfigMapKeyRef.Key)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = w.Name
			if w.Kind == "StatefulSet" {
				env[e.Name] = w.Name + "-0"
			}
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = vigil.Namespace
		}
	}
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		out[i] = a
	}
	return out
}

func newPodFiles(ctx context.Context, t *testing.T, w deploytest.Workload, ports map[string]string) podFiles {
	t.Helper()
	p := podFiles{w: w, root: t.TempDir()}
	c := w.Spec.Containers[0]
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(p.root, m.MountPath)
		must(t, os.MkdirAll(dir, 0o755))
		for _, v := range w.Spec.Volumes {
			if v.Name == m.Name {
				p.fill(ctx, t, v, dir)
			}
		}
	}
	for _, a := range c.Args {
		for _, m := range c.VolumeMounts {
			for _, prefix := range []string{"=", "=unix://"} {
				if i := strings.Index(a, prefix+m.MountPath); i >= 0 {
					i += len(prefix)
					a = a[:i] + filepath.Join(p.root, a[i:])
				}
			}
		}
		for from, to := range ports {
			if strings.HasPrefix(a, "--listen=") || strings.HasPrefix(a, "--datapath=") || strings.HasPrefix(a, "--health-address=") ||
				strings.HasPrefix(a, "--raft-") || strings.HasPrefix(a, "--advertise-address=") {
				a = strings.Replace(a, from, to, 1)
			}
		}
		p.args = append(p.args, a)
	}
	return p
}

func (p podFiles) fill(ctx context.Context, t *testing.T, v corev1.Volume, dir string) {
	t.Helper()
	switch {
	case v.Secret != nil:
		s, err := sb.Client().CoreV1().Secrets(vigil.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
		must(t, err)
		for k, b := range s.Data {
			must(t, os.WriteFile(filepath.Join(dir, k), b, 0o440))
		}
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken == nil {
				continue
			}
			tr, err := sb.Client().CoreV1().ServiceAccounts(vigil.Namespace).CreateToken(ctx, p.w.Spec.ServiceAccountName,
				&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{Audiences: []string{src.ServiceAccountToken.Audience},
					ExpirationSeconds: src.ServiceAccountToken.ExpirationSeconds}}, metav1.CreateOptions{})
			must(t, err)
			must(t, os.WriteFile(filepath.Join(dir, src.ServiceAccountToken.Path), []byte(tr.Status.Token), 0o400))
		}
	}
}

// file is the moved path a flag of the pod's container names.
func (p podFiles) file(flag string) string {
	for _, a := range p.args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// start runs the pod's first container as its ServiceAccount; hosts are
// the Service names it resolves to loopback.
func (p podFiles) start(ctx context.Context, t *testing.T, bin string, hosts ...string) (*exec.Cmd, string) {
	t.Helper()
	c := p.w.Spec.Containers[0]
	if len(c.Command) > 0 {
		// The container's program, from this build's bin/ (the datapath's is
		// vigil-datapath, the manager's vigil-manager).
		bin = filepath.Join(filepath.Dir(bin), filepath.Base(c.Command[0]))
	}
	cmd := newPodIdentity(ctx, t, p.w.Spec.ServiceAccountName, hosts...).command(t, bin, p.args...)
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			cmd.Env = append(cmd.Env, e.Name+"="+vigil.Namespace)
		}
	}
	log, err := os.Create(filepath.Join(t.TempDir(), p.w.Name+".log"))
	must(t, err)
	cmd.Stdout, cmd.Stderr = log, log
	t.Logf("%s: %s %s", p.w.Name, bin, strings.Join(p.args, " "))
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		b, _ := os.ReadFile(log.Name())
		if t.Failed() {
			t.Logf("%s log:\n%s", p.w.Name, b)
		}
	})
	return cmd, log.Name()
}

// waitTLS waits until addr serves TLS that verifies for name with caFile.
func waitTLS(t *testing.T, addr, name, caFile string, cmd *exec.Cmd) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := verifyTLS(addr, name, caFile)
		if err == nil {
			return
		}
		if cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("%s (%s): no TLS verified with the issued CA within 30 s: %v", name, addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func httpsGet(t *testing.T, addr, name, caFile, token, path string) (int, string) {
	t.Helper()
	b, err := os.ReadFile(caFile)
	must(t, err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(b)
	hc := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: name}}}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
	must(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(token))
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Errorf("GET https://%s%s as %s: %v", addr, path, name, err)
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func freeTCPPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
