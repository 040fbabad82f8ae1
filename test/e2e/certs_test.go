package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/pki"
)

// certsSecrets are the Secrets `vigil-manager certs ensure` keeps.
var certsSecrets = []string{vigil.CASecret, vigil.CACertSecret, vigil.DatapathTLSSecret, vigil.ManagerTLSSecret, vigil.APITokenSecret}

// clearCertsSecrets deletes the Secrets of certs ensure from the shared
// sandbox, now and at the end of the test.
func clearCertsSecrets(t *testing.T) {
	t.Helper()
	clear := func() {
		for _, n := range certsSecrets {
			err := sb.Client().CoreV1().Secrets(vigil.Namespace).Delete(context.Background(), n, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete Secret %s: %v", n, err)
			}
		}
	}
	clear()
	t.Cleanup(clear)
}

// runCerts runs bin/vigil-manager certs ensure under the identity of the
// Job vigil-certs (its ServiceAccount of deploy/).
func runCerts(t *testing.T, kubeconfig string) (string, error) {
	t.Helper()
	bin, err := filepath.Abs(managerBin)
	must(t, err)
	out, err := exec.Command(bin, "certs", "ensure", "--namespace="+vigil.Namespace, "--kubeconfig="+kubeconfig).CombinedOutput()
	return string(out), err
}

func secretVersions(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range certsSecrets {
		s, err := sb.Client().CoreV1().Secrets(vigil.Namespace).Get(ctx, n, metav1.GetOptions{})
		must(t, err)
		out[n] = s.ResourceVersion
	}
	return out
}

// TestCerts_Ensure: against the real API server, as the ServiceAccount
// vigil-certs: the first run creates the five Secrets, the second changes
// nothing, a broken Secret fails the run with its name and what to do and is
// left as it was, and the issued certificates verify with the CA for their
// Services' DNS names.
func TestCerts_Ensure(t *testing.T) {
	ctx := context.Background()
	clearCertsSecrets(t)
	kubeconfig, err := sb.ComponentKubeconfig(ctx, vigil.CertsServiceAccount, "")
	must(t, err)
	out, err := runCerts(t, kubeconfig)
	if err != nil || strings.Count(out, " created") != 5 {
		t.Fatalf("first run: %v\n%s\nwant 5 Secrets created", err, out)
	}
	first := secretVersions(ctx, t)
	out, err = runCerts(t, kubeconfig)
	if err != nil || strings.Count(out, " kept") != 5 || strings.Contains(out, "created") {
		t.Fatalf("second run: %v\n%s\nwant 5 Secrets kept", err, out)
	}
	if second := secretVersions(ctx, t); !equalMaps(first, second) {
		t.Errorf("the second run changed Secrets: %v, then %v", first, second)
	}
	secrets := sb.Client().CoreV1().Secrets(vigil.Namespace)
	caSecret, err := secrets.Get(ctx, vigil.CACertSecret, metav1.GetOptions{})
	must(t, err)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caSecret.Data[pki.KeyCA]) {
		t.Fatalf("Secret %s: no CA certificate", vigil.CACertSecret)
	}
	for secret, svc := range map[string]string{vigil.DatapathTLSSecret: vigil.DatapathService, vigil.ManagerTLSSecret: vigil.ManagerService} {
		s, err := secrets.Get(ctx, secret, metav1.GetOptions{})
		must(t, err)
		if s.Type != corev1.SecretTypeTLS {
			t.Errorf("Secret %s: type %s, want %s", secret, s.Type, corev1.SecretTypeTLS)
		}
		b, _ := pem.Decode(s.Data[pki.KeyCert])
		if b == nil {
			t.Fatalf("Secret %s: no certificate", secret)
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		must(t, err)
		for _, name := range []string{svc + "." + vigil.Namespace + ".svc", svc + "." + vigil.Namespace + ".svc.cluster.local", svc} {
			if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
				t.Errorf("Secret %s: does not verify for %s: %v", secret, name, err)
			}
		}
		if life := time.Until(cert.NotAfter); life < 300*24*time.Hour || life > 366*24*time.Hour {
			t.Errorf("Secret %s: valid for %s more, want about a year", secret, life)
		}
	}
	// A broken serving certificate: reported, not replaced.
	s, err := secrets.Get(ctx, vigil.ManagerTLSSecret, metav1.GetOptions{})
	must(t, err)
	s.Data[pki.KeyCert] = []byte("not a certificate")
	s, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	must(t, err)
	out, err = runCerts(t, kubeconfig)
	if err == nil || !strings.Contains(out, "Secret "+vigil.Namespace+"/"+vigil.ManagerTLSSecret) ||
		!strings.Contains(out, "delete secret "+vigil.ManagerTLSSecret) {
		t.Errorf("a broken Secret: %v\n%s\nwant a failure naming it and what to do", err, out)
	}
	after, err := secrets.Get(ctx, vigil.ManagerTLSSecret, metav1.GetOptions{})
	must(t, err)
	if after.ResourceVersion != s.ResourceVersion {
		t.Errorf("the broken Secret was changed")
	}
	t.Logf("broken Secret reported:\n%s", out)
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// podIdentity is what a kubelet gives a pod, for a process started here: the
// in-cluster configuration (KUBERNETES_SERVICE_HOST and _PORT, and a token of
// the pod's ServiceAccount with the API server's CA in
// /var/run/secrets/kubernetes.io/serviceaccount, mounted in a mount namespace
// of the process's own), and cluster DNS names (an /etc/hosts of its own that
// maps them to loopback).
type podIdentity struct {
	dir   string // holds serviceaccount/ and hosts
	hosts []string
}

func newPodIdentity(ctx context.Context, t *testing.T, sa string, hosts ...string) podIdentity {
	t.Helper()
	p := podIdentity{dir: t.TempDir(), hosts: hosts}
	tr, err := sb.Client().CoreV1().ServiceAccounts(vigil.Namespace).CreateToken(ctx, sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))}}, metav1.CreateOptions{})
	must(t, err)
	cfg := sb.RESTConfig()
	ca := cfg.CAData
	if len(ca) == 0 {
		ca, err = os.ReadFile(cfg.CAFile)
		must(t, err)
	}
	sad := filepath.Join(p.dir, "serviceaccount")
	must(t, os.MkdirAll(sad, 0o755))
	must(t, os.WriteFile(filepath.Join(sad, "token"), []byte(tr.Status.Token), 0o600))
	must(t, os.WriteFile(filepath.Join(sad, "ca.crt"), ca, 0o644))
	must(t, os.WriteFile(filepath.Join(sad, "namespace"), []byte(vigil.Namespace), 0o644))
	lines := "127.0.0.1 localhost\n"
	for _, h := range hosts {
		lines += "127.0.0.1 " + h + "\n"
	}
	must(t, os.WriteFile(filepath.Join(p.dir, "hosts"), []byte(lines), 0o644))
	return p
}

func ptrTo[T any](v T) *T { return &v }

// command runs bin ARGS... as in the pod: in a mount namespace of its own
// with /run a tmpfs holding the ServiceAccount files, /etc/hosts replaced.
func (p podIdentity) command(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	host, port := apiServerHostPort(t)
	script := `set -e
mount --make-rprivate /
mount -t tmpfs none /run
mkdir -p /run/secrets/kubernetes.io
cp -r "$VIGIL_POD_DIR/serviceaccount" /run/secrets/kubernetes.io/serviceaccount
mount --bind "$VIGIL_POD_DIR/hosts" /etc/hosts
exec "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "sh", "-c", script, "sh", bin}, args...)...)
	cmd.Env = append(os.Environ(), "VIGIL_POD_DIR="+p.dir, "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port,
		"KUBECONFIG=")
	return cmd
}

func apiServerHostPort(t *testing.T) (string, string) {
	t.Helper()
	u := strings.TrimPrefix(sb.RESTConfig().Host, "https://")
	i := strings.LastIndex(u, ":")
	if i < 0 {
		t.Fatalf("API server address %q has no port", u)
	}
	return u[:i], u[i+1:]
}

// verifyTLS connects to addr and checks that the server's certificate
// verifies with the CA in caFile for serverName.
func verifyTLS(addr, serverName, caFile string) error {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(b)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12})
	if err != nil {
		return err
	}
	return conn.Close()
}
