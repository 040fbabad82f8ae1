package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/images"
)

// TestInstall_RealNodes is `vigil-sandbox up --nodes 3 --kubelet real
// --install`: three real nodes import the images built here, deploy/ (its
// sandbox overlay) is applied through the API server, and every component
// comes up Running and Ready in containers, each pod under its workload's
// own ServiceAccount; the datapath serves TLS that verifies with the CA the
// certificates Job issued for its Service's name, and answers a controller
// identity's call. Then the closed loop runs against what was installed
// (installedLoop): a StatefulSet's writer container, a power cut of its
// node, the replacement Running elsewhere with every acknowledged record,
// the old node fenced, then booted again and untainted by its engine; then
// the upgrade procedure (installedUpgrade): the engines and the managers
// rolled to another image tag while the replacement writes, which sees
// nothing but a pause. Last the uninstall procedure (installedUninstall):
// claims first, `kubectl delete -k deploy/`, then what stays on the Nodes
// and the nodes' disks; nothing of Vigil is left.
func TestInstall_RealNodes(t *testing.T) {
	requireRealNodes(t)
	nodeImages, pause := installImages(t)
	ctx := context.Background()
	t0 := time.Now()
	s := upRealNodes(t, sandbox.Config{Name: "e2e-inst", WorkDir: filepath.Join(os.TempDir(), "vigil-e2e-inst"), Nodes: 3,
		NodeImages: nodeImages, PauseImage: pause, Subnet: "10.213.131.0/24", PodSubnet: "10.217.0.0/16"}, 3*time.Minute)
	up := time.Since(t0)
	res, err := s.Install(ctx, sandbox.InstallConfig{Timeout: 5 * time.Minute, Progressf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, c := range res.Components {
		parts = append(parts, fmt.Sprintf("%s %.1fs", c.Component, c.After.Seconds()))
	}
	t.Logf("figures: 3 real nodes Ready %.1fs after Up was called; deploy/ installed, every component ready %.1fs later (%s); up to all Ready %.1fs",
		up.Seconds(), res.Took.Seconds(), strings.Join(parts, ", "), time.Since(t0).Seconds())
	checkInstalledPods(t, ctx, s)
	dp := installedDatapath(t, ctx, s)
	reportMemory(t, s)
	installedLoop(t, ctx, s, dp)
	installedUninstall(t, ctx, s, dp)
}

// installImages builds every image the install needs (the vigil image from
// bin/, the CSI sidecars from make testbin's binaries) and returns their
// tarballs and the pause image's reference.
func installImages(t *testing.T) ([]string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin"))
	must(t, err)
	t0 := time.Now()
	res, err := images.Build(ctx, images.Options{Out: t.TempDir(), SourceDir: filepath.Join("..", ".."), VigilBinDir: bin,
		TestbinDir: sandbox.BinDir(), Pins: sandbox.Pins(),
		Only: []string{images.Vigil, images.Pause, images.Writer, images.Tools, images.CSIProvisioner, images.CSIAttacher}})
	if err != nil {
		t.Fatalf("build the images: %v", err)
	}
	// The same vigil image under another tag, for the upgrade (installedUpgrade).
	upgrade, err := images.Build(ctx, images.Options{Out: t.TempDir(), SourceDir: filepath.Join("..", ".."), VigilBinDir: bin,
		Tag: upgradeTag, Only: []string{images.Vigil}})
	if err != nil {
		t.Fatalf("build the vigil image tagged %s: %v", upgradeTag, err)
	}
	var files []string
	for _, r := range append(res, upgrade...) {
		files = append(files, r.File)
	}
	pause, err := images.Ref(images.Pause, "dev", nil)
	must(t, err)
	t.Logf("images %d built in %.1fs", len(files), time.Since(t0).Seconds())
	return files, pause
}

// checkInstalledPods: every pod of vigil-system Running and Ready (the
// certificates Job's Succeeded), on a real node (its container runtime
// containerd), under its workload's ServiceAccount, and every component's
// ServiceAccount its own (the fd keeper shares the engine's, without a
// token).
func checkInstalledPods(t *testing.T, ctx context.Context, s *sandbox.Sandbox) {
	t.Helper()
	pods, err := s.Client().CoreV1().Pods(vigil.Namespace).List(ctx, metav1.ListOptions{})
	must(t, err)
	bySA := map[string][]string{}
	for _, p := range pods.Items {
		comp := p.Labels["app.kubernetes.io/component"]
		ready := p.Status.Phase == corev1.PodSucceeded
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		if !ready {
			t.Errorf("pod %s (%s) on %s: phase %s, not Ready", p.Name, comp, p.Spec.NodeName, p.Status.Phase)
		}
		sa := p.Spec.ServiceAccountName
		if sa == "" || sa == "default" {
			t.Errorf("pod %s (%s) runs as ServiceAccount %q", p.Name, comp, sa)
		}
		if !slices.Contains(bySA[sa], comp) {
			bySA[sa] = append(bySA[sa], comp)
		}
		t.Logf("pod %-34s %-15s node %s, ServiceAccount %s, phase %s", p.Name, comp, p.Spec.NodeName, sa, p.Status.Phase)
	}
	for sa, comps := range bySA {
		slices.Sort(comps)
		if len(comps) > 1 && !slices.Equal(comps, []string{"engine-node", "fd-keeper"}) {
			t.Errorf("ServiceAccount %s is shared by components %v", sa, comps)
		}
	}
	for _, want := range []string{"vigil-manager", "vigil-datapath", "vigil-csi-controller", "vigil-engine-node", "vigil-certs"} {
		if _, ok := bySA[want]; !ok {
			t.Errorf("no pod runs as ServiceAccount %s (have %v)", want, bySA)
		}
	}
}

// installedDatapath connects to the installed datapath's pod (the host
// routes each node's pod network) as the manager's ServiceAccount, over TLS
// verified with the Secret vigil-ca-cert for the Service's name, and lists
// its volumes; a client without that CA is refused.
func installedDatapath(t *testing.T, ctx context.Context, s *sandbox.Sandbox) *client.Client {
	t.Helper()
	pods, err := sandbox.WaitPodsRunning(ctx, s.Client(), vigil.Namespace, "app.kubernetes.io/component=datapath", 1, 30*time.Second)
	must(t, err)
	addr := net.JoinHostPort(pods[0].Status.PodIP, "9600")
	ca, err := s.Client().CoreV1().Secrets(vigil.Namespace).Get(ctx, "vigil-ca-cert", metav1.GetOptions{})
	must(t, err)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.Data["ca.crt"]) {
		t.Fatalf("Secret vigil-ca-cert holds no CA certificate in ca.crt: keys %v", ca.Data)
	}
	name := vigil.DatapathService + "." + vigil.Namespace + ".svc"
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: name})
	if err != nil {
		t.Fatalf("datapath %s: TLS for %s with the issued CA: %v", addr, name, err)
	}
	t.Logf("datapath %s on %s serves TLS for %s, issued by %s", addr, pods[0].Spec.NodeName, name,
		conn.ConnectionState().PeerCertificates[0].Issuer.CommonName)
	_ = conn.Close()

	token, err := s.MintDatapathToken(ctx, vigil.ManagerServiceAccount, nil)
	must(t, err)
	dp := installedClient(t, ctx, s, token)
	if _, err := dp.ListVolumes(ctx); err != nil {
		t.Fatalf("the installed datapath refused the manager's identity: %v", err)
	}
	if bad, err := newInstalledClient(t, ctx, s, token, x509.NewCertPool()); err == nil {
		if _, err := bad.ListVolumes(ctx); err == nil {
			t.Errorf("a client without the issued CA was served")
		}
	}
	return dp
}

// installedClient is a datapath client of the installed datapath with
// token, verifying it with the CA of the Secret vigil-ca-cert.
func installedClient(t *testing.T, ctx context.Context, s *sandbox.Sandbox, token string) *client.Client {
	t.Helper()
	ca, err := s.Client().CoreV1().Secrets(vigil.Namespace).Get(ctx, "vigil-ca-cert", metav1.GetOptions{})
	must(t, err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Data["ca.crt"])
	c, err := newInstalledClient(t, ctx, s, token, roots)
	must(t, err)
	return c
}

// newInstalledClient dials the installed datapath's pod by the Service's
// name with token and roots.
func newInstalledClient(t *testing.T, ctx context.Context, s *sandbox.Sandbox, token string, roots *x509.CertPool) (*client.Client, error) {
	t.Helper()
	pods, err := sandbox.WaitPodsRunning(ctx, s.Client(), vigil.Namespace, "app.kubernetes.io/component=datapath", 1, 30*time.Second)
	must(t, err)
	addr := net.JoinHostPort(pods[0].Status.PodIP, "9600")
	tokenFile := filepath.Join(t.TempDir(), "token")
	must(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	dialer := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	})
	c, err := client.Dial(ctx, vigil.DatapathService+"."+vigil.Namespace+".svc:9600", "", client.WithTokenFile(tokenFile),
		client.WithRootCAs(roots), client.WithBulk(false), client.WithDialOptions(dialer), client.WithTimeout(10*time.Second),
		client.WithRetries(1))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}
