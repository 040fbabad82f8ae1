package pki_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/pki"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func TestCA_Issue_VerifiesForServiceNames(t *testing.T) {
	ca, err := pki.NewCA("test-ca", t0, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	names := pki.ServiceDNSNames("vigil-datapath", "vigil-system", "cluster.local")
	c, k, err := ca.Issue(names, t0, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := ca.CheckServing(c, k, names, t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(24 * time.Hour); !exp.Equal(want) {
		t.Errorf("expires %s, want %s", exp, want)
	}
	b, _ := pem.Decode(c)
	cert, _ := x509.ParseCertificate(b.Bytes)
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", cert.PublicKey)
	}
	if cert.IsCA || cert.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("a serving certificate is a CA or not for servers: %+v", cert)
	}
	for _, n := range []string{"vigil-datapath.vigil-system.svc", "vigil-datapath.vigil-system.svc.cluster.local", "vigil-datapath"} {
		if _, err := ca.CheckServing(c, k, []string{n}, t0); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	// Other names, another CA, a later time, another key: refused.
	if _, err := ca.CheckServing(c, k, []string{"vigil-manager.vigil-system.svc"}, t0); !errors.Is(err, pki.ErrInvalid) {
		t.Errorf("another Service's name: %v", err)
	}
	other, _ := pki.NewCA("other", t0, 48*time.Hour)
	if _, err := other.CheckServing(c, k, names, t0); !errors.Is(err, pki.ErrInvalid) {
		t.Errorf("another CA: %v", err)
	}
	if _, err := ca.CheckServing(c, k, names, t0.Add(25*time.Hour)); !errors.Is(err, pki.ErrInvalid) {
		t.Errorf("expired: %v", err)
	}
	if _, err := ca.CheckServing(c, ca.KeyPEM, names, t0); err == nil || !strings.Contains(err.Error(), "not the certificate's") {
		t.Errorf("another key: %v", err)
	}
	// Never past the CA.
	c2, _, _ := ca.Issue(names, t0, 100*time.Hour)
	b, _ = pem.Decode(c2)
	cert, _ = x509.ParseCertificate(b.Bytes)
	if !cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("a certificate beyond its CA: %s, CA %s", cert.NotAfter, ca.Cert.NotAfter)
	}
}

func TestParseCA_BadInput(t *testing.T) {
	ca, _ := pki.NewCA("test-ca", t0, 48*time.Hour)
	leaf, leafKey, _ := ca.Issue([]string{"x"}, t0, 24*time.Hour)
	other, _ := pki.NewCA("other", t0, 48*time.Hour)
	for name, tc := range map[string]struct {
		cert, key []byte
		now       time.Time
		want      string
	}{
		"not pem":       {[]byte("hello"), ca.KeyPEM, t0, "not PEM"},
		"no key":        {ca.CertPEM, nil, t0, "private key is not PEM"},
		"another key":   {ca.CertPEM, other.KeyPEM, t0, "not the certificate's"},
		"not a CA":      {leaf, leafKey, t0, "not a CA"},
		"expired":       {ca.CertPEM, ca.KeyPEM, t0.Add(49 * time.Hour), "expired"},
		"key not a key": {ca.CertPEM, ca.CertPEM, t0, "private key"},
	} {
		if _, err := pki.ParseCA(tc.cert, tc.key, tc.now); !errors.Is(err, pki.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, tc.want)
		}
	}
}

func TestPlan_Validate_BadInput(t *testing.T) {
	if err := pki.DefaultPlan("ns").Validate(); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(p *pki.Plan){
		"no namespace":         func(p *pki.Plan) { p.Namespace = "" },
		"bad domain":           func(p *pki.Plan) { p.ClusterDomain = "cluster.local." },
		"no services":          func(p *pki.Plan) { p.Services = nil },
		"CA too short":         func(p *pki.Plan) { p.CAValidity = time.Hour },
		"CA too long":          func(p *pki.Plan) { p.CAValidity = 30 * 365 * 24 * time.Hour },
		"cert beyond the CA":   func(p *pki.Plan) { p.CertValidity = p.CAValidity + time.Hour },
		"cert too short":       func(p *pki.Plan) { p.CertValidity = time.Minute },
		"service without name": func(p *pki.Plan) { p.Services = map[string]string{"s": ""} },
	} {
		p := pki.DefaultPlan("ns")
		change(&p)
		if err := p.Validate(); !errors.Is(err, pki.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// The same behaviour is proven against a real API server by
// test/e2e/certs_test.go; this is its quick form on a fake clientset.
func TestEnsure_CreatesOnceKeepsAndReports(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	secrets := cs.CoreV1().Secrets("vigil-system")
	plan := pki.DefaultPlan("vigil-system")
	out, err := pki.Ensure(ctx, secrets, plan, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 5 {
		t.Fatalf("first run: %+v, want 5 Secrets created", out)
	}
	for _, o := range out {
		if !o.Created {
			t.Errorf("first run: %s not created", o.Secret)
		}
	}
	before := cs.Actions()
	out, err = pki.Ensure(ctx, secrets, plan, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		if o.Created || o.RenewSoon {
			t.Errorf("second run: %+v, want kept and not due for renewal", o)
		}
	}
	// Within RenewWarning of the serving certificates' expiry: flagged, kept.
	late := t0.Add(plan.CertValidity - pki.RenewWarning + time.Hour)
	out, err = pki.Ensure(ctx, secrets, plan, late)
	if err != nil {
		t.Fatal(err)
	}
	soon := 0
	for _, o := range out {
		if o.RenewSoon {
			soon++
		}
	}
	if soon != 2 {
		t.Errorf("a month before expiry: %+v, want the 2 serving certificates flagged RenewSoon", out)
	}
	for _, a := range cs.Actions()[len(before):] {
		if a.GetVerb() != "get" {
			t.Errorf("second run: %s %s, want only reads", a.GetVerb(), a.GetResource().Resource)
		}
	}
	// A broken serving certificate is reported, not replaced, and a missing
	// token is then not created either.
	s, _ := secrets.Get(ctx, vigil.DatapathTLSSecret, metav1.GetOptions{})
	s.Data[pki.KeyCert] = []byte("garbage")
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(ctx, vigil.APITokenSecret, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = pki.Ensure(ctx, secrets, plan, t0)
	if !errors.Is(err, pki.ErrInvalid) || !strings.Contains(err.Error(), "vigil-system/"+vigil.DatapathTLSSecret) ||
		!strings.Contains(err.Error(), "kubectl -n vigil-system delete secret "+vigil.DatapathTLSSecret) {
		t.Errorf("broken Secret: %v, want ErrInvalid naming it and what to do", err)
	}
	if got, _ := secrets.Get(ctx, vigil.DatapathTLSSecret, metav1.GetOptions{}); string(got.Data[pki.KeyCert]) != "garbage" {
		t.Errorf("the broken Secret was changed")
	}
	if _, err := secrets.Get(ctx, vigil.APITokenSecret, metav1.GetOptions{}); err == nil {
		t.Errorf("a Secret was created although another one is broken")
	}
}

func TestEnsure_OrphanedCertificateReported(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	secrets := cs.CoreV1().Secrets("ns")
	if _, err := pki.Ensure(ctx, secrets, pki.DefaultPlan("ns"), t0); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(ctx, vigil.CASecret, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := pki.Ensure(ctx, secrets, pki.DefaultPlan("ns"), t0)
	if !errors.Is(err, pki.ErrInvalid) || !strings.Contains(err.Error(), "a CA that is gone") {
		t.Errorf("certificates without their CA: %v", err)
	}
	if _, err := secrets.Get(ctx, vigil.CASecret, metav1.GetOptions{}); err == nil {
		t.Errorf("a new CA was made although certificates of the old one remain")
	}
}

func TestCheckToken(t *testing.T) {
	for tok, ok := range map[string]bool{"": false, "short": false, "0123456789abcdef": true, "0123456789abcdef 1": false} {
		if err := pki.CheckToken(tok); (err == nil) != ok {
			t.Errorf("%q: %v, want ok %v", tok, err, ok)
		}
	}
}

// The datapath's certificate also names each of its StatefulSet's pods
// (POD.vigil-datapath-peers.NS.svc), where clients and peers reach the
// servers one by one; the manager's does not. A datapath certificate of
// the release before, without them, is reported with what to do.
func TestEnsure_DatapathCertificateNamesEveryServer(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	secrets := cs.CoreV1().Secrets("vigil-system")
	plan := pki.DefaultPlan("vigil-system")
	if _, err := pki.Ensure(ctx, secrets, plan, t0); err != nil {
		t.Fatal(err)
	}
	caSecret, _ := secrets.Get(ctx, vigil.CASecret, metav1.GetOptions{})
	ca, err := pki.ParseCA(caSecret.Data[pki.KeyCert], caSecret.Data[pki.KeyKey], t0)
	if err != nil {
		t.Fatal(err)
	}
	dp, _ := secrets.Get(ctx, vigil.DatapathTLSSecret, metav1.GetOptions{})
	for _, n := range []string{"vigil-datapath-0.vigil-datapath-peers.vigil-system.svc", "vigil-datapath-2.vigil-datapath-peers.vigil-system.svc.cluster.local"} {
		if _, err := ca.CheckServing(dp.Data[pki.KeyCert], dp.Data[pki.KeyKey], []string{n}, t0); err != nil {
			t.Errorf("the datapath's certificate for %s: %v", n, err)
		}
	}
	mgr, _ := secrets.Get(ctx, vigil.ManagerTLSSecret, metav1.GetOptions{})
	if _, err := ca.CheckServing(mgr.Data[pki.KeyCert], mgr.Data[pki.KeyKey], []string{"vigil-datapath-0.vigil-datapath-peers.vigil-system.svc"}, t0); err == nil {
		t.Errorf("the manager's certificate names the datapath's servers")
	}
	old, k, err := ca.Issue(pki.ServiceDNSNames(vigil.DatapathService, "vigil-system", "cluster.local"), t0, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dp.Data[pki.KeyCert], dp.Data[pki.KeyKey] = old, k
	if _, err := secrets.Update(ctx, dp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = pki.Ensure(ctx, secrets, plan, t0)
	if !errors.Is(err, pki.ErrInvalid) || !strings.Contains(err.Error(), "kubectl -n vigil-system delete secret "+vigil.DatapathTLSSecret) {
		t.Errorf("a datapath certificate without its servers' names: %v, want ErrInvalid saying what to do", err)
	}
}
