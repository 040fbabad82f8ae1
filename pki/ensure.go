package pki

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	vigil "github.com/vigil-storage/vigil"
)

// Keys of the Secrets Ensure writes.
const (
	KeyCert  = corev1.TLSCertKey       // tls.crt
	KeyKey   = corev1.TLSPrivateKeyKey // tls.key
	KeyCA    = "ca.crt"
	KeyToken = "token"
)

// ErrConflict: another writer created a Secret between Ensure's read and its
// create; running Ensure again sees it.
var ErrConflict = errors.New("a Secret was created by someone else meanwhile")

// Plan is what Ensure keeps in Namespace.
type Plan struct {
	Namespace     string
	ClusterDomain string
	// Services are the Services that get a serving certificate, by the name
	// of the Secret that holds it.
	Services map[string]string
	// Peers are, by the name of the Secret, a headless Service whose pods
	// serve with that certificate too, each at its own name (PeerDNSNames):
	// the datapath's servers, which clients reach one by one.
	Peers map[string]string
	// CAValidity and CertValidity are the lifetimes of new certificates.
	CAValidity, CertValidity time.Duration
}

// DefaultPlan is deploy/'s: the datapath and the manager's API in namespace.
func DefaultPlan(namespace string) Plan {
	return Plan{Namespace: namespace, ClusterDomain: "cluster.local",
		Services:   map[string]string{vigil.DatapathTLSSecret: vigil.DatapathService, vigil.ManagerTLSSecret: vigil.ManagerService},
		Peers:      map[string]string{vigil.DatapathTLSSecret: vigil.DatapathPeersService},
		CAValidity: 10 * 365 * 24 * time.Hour, CertValidity: 365 * 24 * time.Hour}
}

// issueNames are the names the certificate in Secret secret carries.
func (p Plan) issueNames(secret string) []string {
	names := ServiceDNSNames(p.Services[secret], p.Namespace, p.ClusterDomain)
	if peers := p.Peers[secret]; peers != "" {
		names = append(names, PeerDNSNames(peers, p.Namespace, p.ClusterDomain)...)
	}
	return names
}

// checkNames are names a kept certificate must verify for: its Service's,
// and a pod's of its peers (a certificate of the release before the
// servers' peers lacks it, and is reported with what to do).
func (p Plan) checkNames(secret string) []string {
	names := ServiceDNSNames(p.Services[secret], p.Namespace, p.ClusterDomain)
	if peers := p.Peers[secret]; peers != "" {
		names = append(names, p.Services[secret]+"-0."+peers+"."+p.Namespace+".svc")
	}
	return names
}

// Validate refuses a plan Ensure cannot carry out, naming the field.
func (p Plan) Validate() error {
	switch {
	case p.Namespace == "":
		return fmt.Errorf("%w: the namespace is empty", ErrInvalid)
	case p.ClusterDomain == "" || strings.HasPrefix(p.ClusterDomain, ".") || strings.HasSuffix(p.ClusterDomain, "."):
		return fmt.Errorf("%w: cluster domain %q: want a DNS domain such as cluster.local", ErrInvalid, p.ClusterDomain)
	case len(p.Services) == 0:
		return fmt.Errorf("%w: no Service to issue a certificate for", ErrInvalid)
	case p.CAValidity < MinValidity || p.CAValidity > MaxValidity:
		return fmt.Errorf("%w: CA validity %s: want %s to %s", ErrInvalid, p.CAValidity, MinValidity, MaxValidity)
	case p.CertValidity < MinValidity || p.CertValidity > p.CAValidity:
		return fmt.Errorf("%w: certificate validity %s: want %s to the CA's validity (%s)", ErrInvalid, p.CertValidity, MinValidity, p.CAValidity)
	}
	for secret, svc := range p.Services {
		if secret == "" || svc == "" {
			return fmt.Errorf("%w: Service %q in Secret %q: both names are needed", ErrInvalid, svc, secret)
		}
	}
	return nil
}

// Outcome is what Ensure did with one Secret.
type Outcome struct {
	Secret  string
	Created bool
	// Expires is the certificate's expiry (zero for the token).
	Expires time.Time
	// RenewSoon: a kept certificate expires within RenewWarning; it is not
	// renewed by Ensure (delete the Secret and run it again).
	RenewSoon bool
}

// RenewWarning is how long before its expiry a kept certificate is flagged
// RenewSoon.
const RenewWarning = 30 * 24 * time.Hour

// Ensure makes the Secrets of plan exist and hold what they must, creating
// those that are missing; those that exist are checked first, and if any is
// not valid nothing is created and the error names each one and what to do.
func Ensure(ctx context.Context, secrets typedcorev1.SecretInterface, plan Plan, now time.Time) ([]Outcome, error) {
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	names := append([]string{vigil.CASecret, vigil.CACertSecret, vigil.APITokenSecret}, sortedKeys(plan.Services)...)
	have := map[string]*corev1.Secret{}
	for _, n := range names {
		s, err := secrets.Get(ctx, n, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("read Secret %s/%s: %w", plan.Namespace, n, err)
		default:
			have[n] = s
		}
	}
	ca, outcomes, problems := check(plan, have, now)
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	want, err := missing(plan, have, ca, now)
	if err != nil {
		return nil, err
	}
	for _, s := range want {
		if _, err := secrets.Create(ctx, s.secret, metav1.CreateOptions{FieldManager: vigil.FieldManager}); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return outcomes, fmt.Errorf("create Secret %s/%s: %w", plan.Namespace, s.secret.Name, ErrConflict)
			}
			return outcomes, fmt.Errorf("create Secret %s/%s: %w", plan.Namespace, s.secret.Name, err)
		}
		outcomes = append(outcomes, Outcome{Secret: s.secret.Name, Created: true, Expires: s.expires})
	}
	for i := range outcomes {
		outcomes[i].RenewSoon = !outcomes[i].Created && !outcomes[i].Expires.IsZero() && outcomes[i].Expires.Sub(now) < RenewWarning
	}
	return outcomes, nil
}

// check judges the Secrets that exist; it returns the CA when there is a good
// one, the outcome of each good Secret, and one line per problem.
func check(plan Plan, have map[string]*corev1.Secret, now time.Time) (*CA, []Outcome, []string) {
	var out []Outcome
	var problems []string
	bad := func(name, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("Secret %s/%s: %s; delete it (kubectl -n %s delete secret %s) to have it made anew",
			plan.Namespace, name, fmt.Sprintf(format, args...), plan.Namespace, name))
	}
	var ca *CA
	if s := have[vigil.CASecret]; s != nil {
		var err error
		if ca, err = ParseCA(s.Data[KeyCert], s.Data[KeyKey], now); err != nil {
			bad(s.Name, "%v", err)
		} else {
			out = append(out, Outcome{Secret: s.Name, Expires: ca.Cert.NotAfter})
		}
	}
	issued := append([]string{vigil.CACertSecret}, sortedKeys(plan.Services)...)
	for _, name := range issued {
		s := have[name]
		switch {
		case s == nil:
			continue
		case have[vigil.CASecret] == nil:
			bad(name, "it was issued by a CA that is gone (no Secret %s)", vigil.CASecret)
			continue
		case ca == nil:
			continue // the CA's problem is reported
		case !ca.SameCert(s.Data[KeyCA]):
			bad(name, "its %s is not the certificate of the CA in Secret %s", KeyCA, vigil.CASecret)
			continue
		case name == vigil.CACertSecret:
			out = append(out, Outcome{Secret: name, Expires: ca.Cert.NotAfter})
			continue
		}
		exp, err := ca.CheckServing(s.Data[KeyCert], s.Data[KeyKey], plan.checkNames(name), now)
		if err != nil {
			bad(name, "%v", err)
			continue
		}
		out = append(out, Outcome{Secret: name, Expires: exp})
	}
	if s := have[vigil.APITokenSecret]; s != nil {
		if err := CheckToken(string(s.Data[KeyToken])); err != nil {
			bad(s.Name, "key %s: %v", KeyToken, err)
		} else {
			out = append(out, Outcome{Secret: s.Name})
		}
	}
	return ca, out, problems
}

type newSecret struct {
	secret  *corev1.Secret
	expires time.Time
}

// missing builds the Secrets that do not exist yet, the CA first.
func missing(plan Plan, have map[string]*corev1.Secret, ca *CA, now time.Time) ([]newSecret, error) {
	var out []newSecret
	if ca == nil {
		var err error
		if ca, err = NewCA("vigil-ca."+plan.Namespace, now, plan.CAValidity); err != nil {
			return nil, err
		}
		out = append(out, newSecret{secretOf(plan, vigil.CASecret, corev1.SecretTypeTLS,
			map[string][]byte{KeyCert: ca.CertPEM, KeyKey: ca.KeyPEM}), ca.Cert.NotAfter})
	}
	if have[vigil.CACertSecret] == nil {
		out = append(out, newSecret{secretOf(plan, vigil.CACertSecret, corev1.SecretTypeOpaque,
			map[string][]byte{KeyCA: ca.CertPEM}), ca.Cert.NotAfter})
	}
	for _, name := range sortedKeys(plan.Services) {
		if have[name] != nil {
			continue
		}
		c, k, err := ca.Issue(plan.issueNames(name), now, plan.CertValidity)
		if err != nil {
			return nil, fmt.Errorf("issue the certificate of Service %s: %w", plan.Services[name], err)
		}
		cert, _, _ := parsePair(c, k)
		out = append(out, newSecret{secretOf(plan, name, corev1.SecretTypeTLS,
			map[string][]byte{KeyCert: c, KeyKey: k, KeyCA: ca.CertPEM}), cert.NotAfter})
	}
	if have[vigil.APITokenSecret] == nil {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		out = append(out, newSecret{secret: secretOf(plan, vigil.APITokenSecret, corev1.SecretTypeOpaque,
			map[string][]byte{KeyToken: []byte(hex.EncodeToString(raw))})})
	}
	return out, nil
}

func secretOf(plan Plan, name string, typ corev1.SecretType, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: plan.Namespace, Labels: map[string]string{
			"app.kubernetes.io/name": "vigil", "app.kubernetes.io/component": "certs", "app.kubernetes.io/part-of": "vigil"}},
		Type: typ, Data: data,
	}
}

// MinTokenLen refuses API tokens short enough to guess (the manager's rule).
const MinTokenLen = 16

// CheckToken accepts a token of at least MinTokenLen characters on one line
// without spaces.
func CheckToken(tok string) error {
	switch {
	case tok == "":
		return errors.New("the token is empty")
	case len(tok) < MinTokenLen:
		return fmt.Errorf("the token has %d characters; at least %d are needed", len(tok), MinTokenLen)
	case strings.ContainsAny(tok, " \t\r\n"):
		return errors.New("the token must be one line without spaces")
	}
	return nil
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
