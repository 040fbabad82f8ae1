package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// fakeCluster writes what NodeKubeconfig reads of a sandbox: its state, an
// admin kubeconfig and a CA as kwokctl lays them out. It returns the sandbox
// and the CA.
func fakeCluster(t *testing.T) (*Sandbox, *x509.Certificate) {
	t.Helper()
	cfg := Config{Nodes: 2, WorkDir: t.TempDir(), Name: "ids"}.withDefaults()
	st, err := newState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.APIServerPort = 6443
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kwok-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pki := filepath.Join(cfg.WorkDir, "kwok", "clusters", cfg.Name, "pki")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(pki, 0o700))
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	must(os.WriteFile(filepath.Join(pki, "ca.crt"), caPEM, 0o600))
	must(os.WriteFile(filepath.Join(pki, "ca.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kwok-ids"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443", CertificateAuthorityData: caPEM}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "admin-secret"}
	kc.Contexts["kwok-ids"] = &clientcmdapi.Context{Cluster: "kwok-ids", AuthInfo: "admin"}
	kc.CurrentContext = "kwok-ids"
	must(clientcmd.WriteToFile(*kc, st.Kubeconfig))
	return &Sandbox{workDir: cfg.WorkDir}, ca
}

func TestSandbox_NodeKubeconfig_KubeletIdentity(t *testing.T) {
	s, ca := fakeCluster(t)
	path, err := s.NodeKubeconfig("node-2")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, mode %v; want 0600", path, err, fi.Mode())
	}
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cur := kc.Contexts[kc.CurrentContext]
	cluster, user := kc.Clusters[cur.Cluster], kc.AuthInfos[cur.AuthInfo]
	if cluster.Server != "https://10.213.0.5:6443" {
		t.Errorf("server %s, want node-2's link to the API server https://10.213.0.5:6443", cluster.Server)
	}
	if user.Token != "" || strings.Contains(string(mustRead(t, path)), "admin-secret") {
		t.Errorf("the node's kubeconfig carries the admin's credential")
	}
	blk, _ := pem.Decode(user.ClientCertificateData)
	if blk == nil {
		t.Fatalf("no client certificate in %s", path)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "system:node:node-2" || strings.Join(cert.Subject.Organization, ",") != "system:nodes" {
		t.Errorf("subject %s, want CN=system:node:node-2, O=system:nodes", cert.Subject)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the certificate is not a client certificate of the cluster CA: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSandbox_NodeKubeconfig_BadInput(t *testing.T) {
	s, _ := fakeCluster(t)
	if _, err := s.NodeKubeconfig("node-9"); !errors.Is(err, ErrUnknownNode) || !strings.Contains(err.Error(), "node-1") {
		t.Errorf("unknown node: %v, want ErrUnknownNode listing the nodes", err)
	}
	pki := filepath.Join(s.workDir, "kwok", "clusters", "ids", "pki")
	if err := os.WriteFile(filepath.Join(pki, "ca.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NodeKubeconfig("node-1"); err == nil || !strings.Contains(err.Error(), "no PEM block") {
		t.Errorf("a CA key that is no PEM: %v, want an error saying so", err)
	}
	if _, err := (&Sandbox{workDir: t.TempDir()}).NodeKubeconfig("node-1"); !errors.Is(err, ErrNotUp) {
		t.Errorf("no sandbox: %v, want ErrNotUp", err)
	}
	if _, err := os.Stat(identityKubeconfig(s.workDir, "kubelet", "node-1")); err == nil {
		t.Errorf("a failed NodeKubeconfig wrote a kubeconfig")
	}
}

func TestSandbox_ComponentKubeconfig_BadInput(t *testing.T) {
	s, _ := fakeCluster(t)
	ctx := context.Background()
	_, err := s.ComponentKubeconfig(ctx, "default", "")
	if !errors.Is(err, ErrUnknownIdentity) || !strings.Contains(err.Error(), "vigil-manager") {
		t.Errorf("a ServiceAccount outside deploy/: %v, want ErrUnknownIdentity listing deploy/'s", err)
	}
	if _, err := s.ComponentKubeconfig(ctx, "vigil-engine-node", "node-9"); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("an unknown node: %v, want ErrUnknownNode", err)
	}
	entries, _ := os.ReadDir(filepath.Join(s.workDir, "identities"))
	if len(entries) > 0 {
		t.Errorf("bad input wrote %d files under identities/", len(entries))
	}
}

func TestKubeletRBAC_OnlyTheInformers(t *testing.T) {
	objs := kubeletRBAC()
	if len(objs) != 2 || objs[0].GetKind() != "ClusterRole" || objs[1].GetKind() != "ClusterRoleBinding" {
		t.Fatalf("objects %v, want the ClusterRole and its binding", objs)
	}
	rules, _, _ := unstructured.NestedSlice(objs[0].Object, "rules")
	var got []string
	for _, r := range rules {
		m := r.(map[string]any)
		got = append(got, strings.TrimSpace(strings.Join(toStrings(m["resources"]), ",")+" "+strings.Join(toStrings(m["verbs"]), ",")))
	}
	if want := "persistentvolumeclaims,persistentvolumes list,watch|volumeattachments list,watch"; strings.Join(got, "|") != want {
		t.Errorf("rules %q, want %q: the stand-in's informers, nothing a kubelet's Node authorizer gives already", strings.Join(got, "|"), want)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
