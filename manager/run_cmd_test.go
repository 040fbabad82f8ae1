package manager

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"k8s.io/client-go/rest"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
)

// apiKinds are the resources `run` lists, watches or writes, with their kinds.
var apiKinds = map[string][2]string{
	"pods": {"v1", "Pod"}, "nodes": {"v1", "Node"}, "persistentvolumeclaims": {"v1", "PersistentVolumeClaim"},
	"persistentvolumes": {"v1", "PersistentVolume"}, "volumeattachments": {"storage.k8s.io/v1", "VolumeAttachment"},
	"replicasets": {"apps/v1", "ReplicaSet"}, "leases": {"coordination.k8s.io/v1", "Lease"}, "events": {"v1", "Event"},
	"namespaces": {"v1", "Namespace"}, "noderecoveries": {"vigil.io/v1alpha1", "NodeRecovery"},
}

// fakeAPIServer is the smallest API server `run` can start against: empty lists,
// watches that stay open, and objects that are stored as written (the Lease).
type fakeAPIServer struct {
	mu      sync.Mutex
	objects map[string][]byte
	// down makes every new request fail with 503, as an API server that is
	// restarting would.
	down atomic.Bool
	// noCRD: the NodeRecovery CRD is not installed (discovery does not list it).
	noCRD atomic.Bool
	// discoveryForbidden: this many discovery requests of vigil.io get 403
	// first, as from an API server whose authorizer is not ready yet.
	discoveryForbidden atomic.Int32
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.down.Load() {
		http.Error(w, "restarting", http.StatusServiceUnavailable)
		return
	}
	if r.URL.Path == "/apis/vigil.io/v1alpha1" {
		if f.discoveryForbidden.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"Forbidden","code":403,"message":"forbidden: not ready"}`)
			return
		}
		if f.noCRD.Load() {
			http.Error(w, "404 page not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"vigil.io/v1alpha1",`+
			`"resources":[{"name":"noderecoveries","singularName":"noderecovery","namespaced":false,"kind":"NodeRecovery","verbs":["get","list","watch","create","update","patch"]}]}`)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	resource, name := "", ""
	for i, p := range parts {
		if _, ok := apiKinds[p]; ok && (i == 0 || parts[i-1] != "namespaces") {
			resource = p
			if i+1 < len(parts) {
				name = parts[i+1]
			}
		}
	}
	kind, ok := apiKinds[resource]
	if !ok {
		http.Error(w, "unknown resource "+r.URL.Path, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodGet && (q.Get("watch") == "true" || q.Get("watch") == "1"):
		if q.Get("sendInitialEvents") == "true" {
			fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"apiVersion":%q,"kind":%q,"metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", kind[0], kind[1])
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.Method == http.MethodGet && name == "":
		fmt.Fprintf(w, `{"apiVersion":%q,"kind":"%sList","metadata":{"resourceVersion":"1"},"items":[]}`, kind[0], kind[1])
	case r.Method == http.MethodGet:
		f.mu.Lock()
		body, ok := f.objects[r.URL.Path]
		f.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404,"details":{"name":%q,"kind":%q}}`, name, resource)
			return
		}
		_, _ = w.Write(body)
	default: // POST, PUT, PATCH: store and echo, as JSON
		body, _ := io.ReadAll(r.Body)
		if obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil); err == nil {
			obj.GetObjectKind().SetGroupVersionKind(*gvk)
			body, _ = json.Marshal(obj)
		}
		path := r.URL.Path
		if r.Method == http.MethodPost {
			var m struct {
				Metadata struct{ Name string } `json:"metadata"`
			}
			_ = json.Unmarshal(body, &m)
			path += "/" + m.Metadata.Name
			w.WriteHeader(http.StatusCreated)
		}
		if r.Method == http.MethodPatch {
			body = []byte(fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q}}`, kind[0], kind[1], name))
		}
		f.mu.Lock()
		f.objects[path] = body
		f.mu.Unlock()
		_, _ = w.Write(body)
	}
}

func (f *fakeAPIServer) object(path string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return string(f.objects[path])
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: t}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
`, server)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const runChildEnv = "VIGIL_TEST_RUN_ARGS"

func TestRun_Child(t *testing.T) {
	args := os.Getenv(runChildEnv)
	if args == "" {
		t.Skip("only runs as the child of TestRun_SIGTERMReleasesLeaseAndExits")
	}
	if err := App().Run(append([]string{"vigil-manager"}, strings.Split(args, "\x1f")...)); err != nil {
		t.Fatal(err)
	}
}

// The manager starts against an API server, becomes ready once its informers
// synced, takes the Lease, serves metrics, and on SIGTERM releases the Lease and
// exits 0.
func TestRun_SIGTERMReleasesLeaseAndExits(t *testing.T) {
	api, dir, cmd, base, rest := startLeading(t)
	if code := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"vigil_nodes_down", "vigil_reaper_volumeattachments_deleted_total", "go_goroutines"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	// The REST API and the UI are on the same listener; writes need the token
	// generated into --state-dir.
	if code := get(t, base+"/v1/settings"); code != http.StatusOK {
		t.Errorf("/v1/settings = %d", code)
	}
	if code := get(t, base+"/"); code != http.StatusOK {
		t.Errorf("the UI / = %d", code)
	}
	if tok, err := os.ReadFile(filepath.Join(dir, "state", tokenFileName)); err != nil || len(strings.TrimSpace(string(tok))) != 64 {
		t.Errorf("generated token: %q %v", tok, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("still running 20 s after SIGTERM")
	}
	if tail := <-rest; !strings.Contains(tail, "vigil-manager: stopped") {
		t.Errorf("no clean stop line in %q", tail)
	}
	if l := api.object(testLeasePath); !strings.Contains(l, `"holderIdentity":""`) && strings.Contains(l, `"holderIdentity":"`) {
		t.Errorf("lease not released on shutdown: %s", l)
	}
}

// startRunChild runs `vigil-manager run` with args against api in a child
// process and returns it with the base URL it serves on and a channel that
// gets the rest of its output once it exits.
func startRunChild(t *testing.T, args []string) (*exec.Cmd, string, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRun_Child$", "-test.v")
	cmd.Env = append(os.Environ(), runChildEnv+"="+strings.Join(args, "\x1f"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	base := ""
	for lines.Scan() {
		if _, a, ok := strings.Cut(lines.Text(), "/readyz on "); ok {
			base = strings.TrimSpace(a)
			break
		}
	}
	if base == "" {
		t.Fatal("the manager never said where it serves")
	}
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()
	return cmd, base, rest
}

// A leader that loses its Lease (the API server away longer than the renew
// deadline) exits with an error, so that its Deployment starts it again. It
// used to stay up forever, neither leading nor exiting: its informers ran on
// the process's context and the factory's Shutdown waited for them (the chaos
// suite found both managers in that state after an API server restart).
func TestRun_LeadershipLostExits(t *testing.T) {
	api, _, cmd, _, rest := startLeading(t, "--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1s",
		"--leader-elect-retry-period", "200ms")
	api.down.Store(true)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("exit status 0 after losing the Lease; want an error")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("still running 20 s after the API server went away (renew deadline 1 s)")
	}
	if tail := <-rest; !strings.Contains(tail, "leadership lost") {
		t.Errorf("no word of the lost Lease in %q", tail)
	}
}

const testLeasePath = "/apis/coordination.k8s.io/v1/namespaces/vigil-system/leases/vigil-manager"

// startLeading runs `vigil-manager run` (with extra flags) in a child process
// against a new fake API server and a new directory for its state, and waits
// until it is ready and holds the Lease.
func startLeading(t *testing.T, extra ...string) (api *fakeAPIServer, dir string, cmd *exec.Cmd, base string, rest <-chan string) {
	t.Helper()
	api = &fakeAPIServer{objects: map[string][]byte{
		"/api/v1/namespaces/vigil-system": []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"vigil-system"}}`),
	}}
	dir = t.TempDir()
	cmd, base, rest = startWith(t, api, dir, extra...)
	return api, dir, cmd, base, rest
}

// startWith runs the manager against api with its files in dir, and waits
// until it is ready and leading.
func startWith(t *testing.T, api *fakeAPIServer, dir string, extra ...string) (cmd *exec.Cmd, base string, rest <-chan string) {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cmd, base, rest = startRunChild(t, append([]string{"run", "--kubeconfig", writeKubeconfig(t, srv.URL), "--listen", "127.0.0.1:0",
		"--settings-store", "bolt:" + filepath.Join(dir, "settings.db"), "--leader-elect-lease-namespace", "vigil-system",
		"--state-dir", filepath.Join(dir, "state")}, extra...))
	awaitLeading(t, api, base)
	return cmd, base, rest
}

// awaitLeading waits until the manager at base is ready and holds the Lease.
func awaitLeading(t *testing.T, api *fakeAPIServer, base string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !(get(t, base+"/readyz") == http.StatusOK && strings.Contains(api.object(testLeasePath), `"holderIdentity":"`)) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready and leading after 20 s; lease %q", api.object(testLeasePath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestRun_BadFlagsAreRefused(t *testing.T) {
	// Each case must be refused for its own reason, before any cluster is asked.
	cases := map[string]struct {
		args []string
		want string
	}{
		"listen":                             {[]string{"--listen", "nonsense", "--kubeconfig", "/nope"}, "--listen"},
		"workers":                            {[]string{"--workers", "0"}, "--workers"},
		"qps":                                {[]string{"--kube-api-qps", "-1"}, "--kube-api-qps"},
		"events qps":                         {[]string{"--events-qps", "0"}, "--events-qps 0 and --events-burst 50: both must be positive"},
		"events burst":                       {[]string{"--events-burst", "0"}, "--events-burst"},
		"events qps not a number":            {[]string{"--events-qps", "lots"}, "events-qps"},
		"lease":                              {[]string{"--leader-elect-lease-name", ""}, "--leader-elect-lease-name"},
		"args":                               {[]string{"extra"}, "takes no arguments"},
		"lease duration":                     {[]string{"--leader-elect-lease-duration", "5s"}, "must be less than --leader-elect-lease-duration"},
		"renew vs retry":                     {[]string{"--leader-elect-renew-deadline", "2s"}, "--leader-elect-retry-period"},
		"zero retry":                         {[]string{"--leader-elect-retry-period", "0s"}, "must be positive"},
		"datapath without token":             {[]string{"--datapath", "127.0.0.1:9600"}, "needs --datapath-token-file"},
		"token without datapath":             {[]string{"--datapath-token-file", "/tmp/t"}, "without --datapath"},
		"datapath timeout":                   {[]string{"--datapath", "x:1", "--datapath-token-file", "/t", "--datapath-timeout", "0s"}, "--datapath-timeout"},
		"datapath off loopback in plaintext": {[]string{"--datapath", "10.1.2.3:9600", "--datapath-token-file", "/t"}, "--datapath-ca-file"},
		"datapath CA and insecure": {[]string{"--datapath", "10.1.2.3:9600", "--datapath-token-file", "/t",
			"--datapath-ca-file", "/ca", "--datapath-insecure"}, "contradict"},
		"datapath without a port":          {[]string{"--datapath", "10.1.2.3", "--datapath-token-file", "/t"}, `--datapath: datapath servers "10.1.2.3": item 1: "10.1.2.3" is not host:port`},
		"datapath list with an empty item": {[]string{"--datapath", "127.0.0.1:1,,127.0.0.1:2", "--datapath-token-file", "/t"}, "item 2: empty"},
		"datapath list with a bad port": {[]string{"--datapath", "127.0.0.1:1,127.0.0.1:http", "--datapath-token-file", "/t"},
			`item 2: "127.0.0.1:http": port "http" is not a number from 1 to 65535`},
		"datapath list with a duplicate": {[]string{"--datapath", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:1", "--datapath-token-file", "/t"},
			"127.0.0.1:1 is given twice (items 1 and 3)"},
		"datapath list off loopback in plaintext": {[]string{"--datapath", "127.0.0.1:1,10.1.2.3:9600", "--datapath-token-file", "/t"},
			"datapath 10.1.2.3:9600 is not on loopback"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := App().Run(append([]string{"vigil-manager", "run"}, tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestCheckLeaseNamespace_MissingNamespaceIsAClearError(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "present"}})
	if err := checkLeaseNamespace(ctx, client, "present"); err != nil {
		t.Fatalf("present namespace: %v", err)
	}
	err := checkLeaseNamespace(ctx, client, "vigil-system")
	if err == nil || !strings.Contains(err.Error(), "vigil-system") || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing namespace: err = %v", err)
	}
}

// Without the NodeRecovery CRD the manager stops at once with one error that
// names the file to apply and the flag that runs without records; with that
// flag it runs, and the UI's recoveries say they are off.
func TestRun_MissingCRD(t *testing.T) {
	api := &fakeAPIServer{objects: map[string][]byte{
		"/api/v1/namespaces/vigil-system": []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"vigil-system"}}`),
	}}
	api.noCRD.Store(true)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	args := []string{"vigil-manager", "run", "--kubeconfig", writeKubeconfig(t, srv.URL), "--listen", "127.0.0.1:0",
		"--settings-store", "bolt:" + filepath.Join(dir, "settings.db"), "--leader-elect-lease-namespace", "vigil-system",
		"--state-dir", filepath.Join(dir, "state")}
	// A manager that started anyway stops when ctx ends, and the test fails.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err := App().RunContext(ctx, args)
	if err == nil || !strings.Contains(err.Error(), recoveryCRDFile) || !strings.Contains(err.Error(), "--recoveries=false") {
		t.Fatalf("run without the CRD = %v, want one error naming %s and --recoveries=false", err, recoveryCRDFile)
	}

	_, base, _ := startWith(t, api, dir, "--recoveries=false")
	code, body := getBody(t, base+"/readyz")
	if code != http.StatusOK || !strings.Contains(body, "ok") || !strings.Contains(body, "warning: no --datapath") {
		t.Errorf("/readyz without a fencing back end = %q, want ok and a warning line", body)
	}
	if code := get(t, base+"/v1/recoveries"); code != http.StatusServiceUnavailable {
		t.Errorf("/v1/recoveries with --recoveries=false = %d, want 503", code)
	}
}

// Only the API server's answer that the CRD is absent stops the start; a 403
// or an unreachable API server is asked again, and reported as what it is.
func TestRecoveryClient_TransientErrorsAreAskedAgain(t *testing.T) {
	api := &fakeAPIServer{objects: map[string][]byte{}}
	api.discoveryForbidden.Store(3)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	if _, err := recoveryClient(context.Background(), cfg, 20*time.Second); err != nil {
		t.Fatalf("after three 403s, then the CRD served: %v", err)
	}
	api.discoveryForbidden.Store(1000)
	_, err := recoveryClient(context.Background(), cfg, time.Second)
	if err == nil || errors.Is(err, errNoRecoveryCRD) || !strings.Contains(err.Error(), "cannot tell") || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("403 throughout = %v; want 'cannot tell' with the API server's answer, not 'not installed'", err)
	}
	api.discoveryForbidden.Store(0)
	api.noCRD.Store(true)
	if _, err := recoveryClient(context.Background(), cfg, 20*time.Second); !errors.Is(err, errNoRecoveryCRD) {
		t.Fatalf("CRD absent = %v; want errNoRecoveryCRD at once", err)
	}
}

func TestNewMux_ReadyzFollowsSyncAndSettings(t *testing.T) {
	synced, blocked := false, error(nil)
	mux := newMux(prometheus.NewRegistry(), func() bool { return synced }, func() error { return blocked }, "no fencer")
	for _, tc := range []struct {
		synced  bool
		blocked error
		want    int
		body    string
	}{
		{false, nil, http.StatusServiceUnavailable, "not synced"},
		{true, nil, http.StatusOK, "ok\nwarning: no fencer\n"},
		{true, errors.New("not acting: overlay file /x/dry-run refused"), http.StatusServiceUnavailable, "/x/dry-run"},
	} {
		synced, blocked = tc.synced, tc.blocked
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("synced=%t blocked=%v: /readyz = %d %q, want %d with %q", tc.synced, tc.blocked, rec.Code, rec.Body, tc.want, tc.body)
		}
	}
}

func TestManagerGCPercent_DefaultUnlessGOGCIsSet(t *testing.T) {
	if pct, set := managerGCPercent(func(string) string { return "" }); !set || pct != 50 {
		t.Errorf("without GOGC: %d, %v; want 50, true", pct, set)
	}
	if _, set := managerGCPercent(func(k string) string { return map[string]string{"GOGC": "200"}[k] }); set {
		t.Error("GOGC=200 in the environment was overridden")
	}
}
