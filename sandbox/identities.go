package sandbox

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/deploy"
)

// IdentityTokenLifetime is how long the ServiceAccount tokens of
// ComponentKubeconfig last (the API server caps nothing in the sandbox): long
// enough for any test and a demo left running for weeks; a new kubeconfig
// gets a new token.
const IdentityTokenLifetime = 30 * 24 * time.Hour

// KubeletRole is the sandbox's ClusterRole for the kubelet stand-ins' node
// identities (group system:nodes), applied by ApplyDeployRBAC: a real kubelet
// GETs each claim, volume and attachment of its pods, which the API server's
// Node authorizer allows; the stand-in watches them with informers, which it
// does not, so this role adds list and watch of exactly those three.
const KubeletRole = "vigil-sandbox-kubelet"

// fieldManagerSandbox is the field manager of the sandbox's server-side applies.
const fieldManagerSandbox = "vigil-sandbox"

// OwnObjectsName is the label app.kubernetes.io/name of the objects the
// sandbox creates for itself (the roles of its kubelets and kwok), which an
// uninstall of Vigil leaves.
const OwnObjectsName = "vigil-sandbox"

// ErrUnknownIdentity: a ServiceAccount that is not one of deploy/'s.
var ErrUnknownIdentity = errors.New("not a ServiceAccount of deploy/")

// identityResources maps the kinds ApplyDeployRBAC applies to their resources.
var identityResources = map[string]schema.GroupVersionResource{
	"ServiceAccount":                   {Version: "v1", Resource: "serviceaccounts"},
	"ClusterRole":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Role":                             {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"ValidatingAdmissionPolicy":        {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	"ValidatingAdmissionPolicyBinding": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
}

// ApplyDeployRBAC gives the sandbox deploy/'s identities: the namespace
// vigil-system, then, with server-side apply, every ServiceAccount, role and
// binding of deploy/base and the engine's admission policy
// (deploy.Identities, exactly what `kubectl apply -k deploy/` applies for
// them), and the sandbox's KubeletRole for the kubelet stand-ins. Idempotent.
func (s *Sandbox) ApplyDeployRBAC(ctx context.Context) error {
	objs, err := deploy.Identities()
	if err != nil {
		return err
	}
	if err := EnsureNamespace(ctx, s.client, vigil.Namespace); err != nil {
		return fmt.Errorf("apply deploy/ RBAC: %w", err)
	}
	dc, err := dynamic.NewForConfig(s.rest)
	if err != nil {
		return fmt.Errorf("apply deploy/ RBAC: %w", err)
	}
	for _, o := range append(objs, kubeletRBAC()...) {
		gvr, ok := identityResources[o.GetKind()]
		if !ok {
			return fmt.Errorf("apply deploy/ RBAC: %s %s: kind not expected among identities", o.GetKind(), o.GetName())
		}
		var ri dynamic.ResourceInterface = dc.Resource(gvr)
		if o.GetNamespace() != "" {
			ri = dc.Resource(gvr).Namespace(o.GetNamespace())
		}
		if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManagerSandbox, Force: true}); err != nil {
			return fmt.Errorf("apply deploy/ RBAC: %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// kubeletRBAC is KubeletRole and its binding to every node (system:nodes).
func kubeletRBAC() []*unstructured.Unstructured {
	meta := map[string]any{"name": KubeletRole, "labels": map[string]any{"app.kubernetes.io/name": OwnObjectsName}}
	role := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
		"rules": []any{
			map[string]any{"apiGroups": []any{""}, "resources": []any{"persistentvolumeclaims", "persistentvolumes"}, "verbs": []any{"list", "watch"}},
			map[string]any{"apiGroups": []any{"storage.k8s.io"}, "resources": []any{"volumeattachments"}, "verbs": []any{"list", "watch"}},
		},
	}}
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta,
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KubeletRole},
		"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}},
	}}
	return []*unstructured.Unstructured{role, binding}
}

// deployServiceAccounts are the names of deploy/'s ServiceAccounts.
func deployServiceAccounts() ([]string, error) {
	objs, err := deploy.Identities()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" {
			out = append(out, o.GetName())
		}
	}
	return out, nil
}

// ComponentKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount vigil-system/sa of deploy/ (ApplyDeployRBAC first) with a
// token from TokenRequest valid for IdentityTokenLifetime, and returns its
// path. With node "", it reaches the API server on 127.0.0.1, for a host
// process (the manager, the CSI controller). With a node, the token is bound
// to that Node object, so the API server names the node in the requests'
// user (extra authentication.kubernetes.io/node-name, what the engine's
// admission policy checks), and the kubeconfig reaches the API server over
// the node's link, so a partition of the node cuts it off; such a token dies
// with the Node object. A new call writes a new token.
func (s *Sandbox) ComponentKubeconfig(ctx context.Context, sa, node string) (string, error) {
	known, err := deployServiceAccounts()
	if err != nil {
		return "", err
	}
	if !slices.Contains(known, sa) {
		return "", fmt.Errorf("%w: %q: want one of %s", ErrUnknownIdentity, sa, strings.Join(known, ", "))
	}
	st, err := loadState(s.workDir)
	if err != nil {
		return "", err
	}
	server := ""
	req := authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(IdentityTokenLifetime / time.Second))}}
	if node != "" {
		n, err := st.node(node)
		if err != nil {
			return "", err
		}
		obj, err := s.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("identity %s of %s: %w", sa, node, err)
		}
		req.Spec.BoundObjectRef = &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: obj.UID}
		server = fmt.Sprintf("https://%s:%d", n.HostIP, st.APIServerPort)
	}
	tr, err := s.client.CoreV1().ServiceAccounts(vigil.Namespace).CreateToken(ctx, sa, &req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("identity %s: TokenRequest: %w (ApplyDeployRBAC creates the ServiceAccounts)", sa, err)
	}
	path := identityKubeconfig(s.workDir, sa, node)
	user := &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	if err := writeKubeconfig(st, path, "system:serviceaccount:"+vigil.Namespace+":"+sa, server, user); err != nil {
		return "", err
	}
	return path, nil
}

// NodeKubeconfig writes the kubeconfig of node's own identity, as a kubelet
// has: a client certificate signed by the cluster's CA for user
// system:node:NODE in group system:nodes, valid a year, reaching the API
// server over the node's link. The API server's Node authorizer and the
// NodeRestriction admission plugin limit it to what a kubelet of that node
// may do (its own Node's status, its pods, Events); the sandbox's KubeletRole
// adds the informers of the kubelet stand-in. It returns the path.
func (s *Sandbox) NodeKubeconfig(node string) (string, error) {
	st, n, err := s.loadNode(node)
	if err != nil {
		return "", err
	}
	user := "system:node:" + node
	certPEM, keyPEM, err := signClientCert(filepath.Join(st.WorkDir, "kwok", "clusters", st.Name, "pki"), user, "system:nodes")
	if err != nil {
		return "", fmt.Errorf("identity %s: %w", user, err)
	}
	path := identityKubeconfig(s.workDir, "kubelet", node)
	auth := &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	if err := writeKubeconfig(st, path, user, fmt.Sprintf("https://%s:%d", n.HostIP, st.APIServerPort), auth); err != nil {
		return "", err
	}
	return path, nil
}

// identityKubeconfig is where the kubeconfig of an identity is written:
// WorkDir/identities/NAME.kubeconfig, or NAME@NODE.kubeconfig for a node's.
func identityKubeconfig(workDir, name, node string) string {
	if node != "" {
		name += "@" + node
	}
	return filepath.Join(workDir, "identities", name+".kubeconfig")
}

// writeKubeconfig writes the admin kubeconfig's cluster (its server replaced
// when server is set) with user as the only credential, mode 0600.
func writeKubeconfig(st *state, path, userName, server string, user *clientcmdapi.AuthInfo) error {
	admin, err := clientcmd.LoadFromFile(st.Kubeconfig)
	if err != nil {
		return fmt.Errorf("read kubeconfig %s: %w", st.Kubeconfig, err)
	}
	cur, ok := admin.Contexts[admin.CurrentContext]
	if !ok || admin.Clusters[cur.Cluster] == nil {
		return fmt.Errorf("kubeconfig %s: no current cluster", st.Kubeconfig)
	}
	cluster := admin.Clusters[cur.Cluster].DeepCopy()
	if server != "" {
		cluster.Server = server
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[st.Name] = cluster
	kc.AuthInfos[userName] = user
	kc.Contexts[st.Name] = &clientcmdapi.Context{Cluster: st.Name, AuthInfo: userName}
	kc.CurrentContext = st.Name
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("identity kubeconfig: %w", err)
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("identity kubeconfig %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}

// signClientCert makes a P-256 key and a client certificate for CN=user,
// O=group, signed by the CA in pkiDir (ca.crt, ca.key as kwokctl writes them).
func signClientCert(pkiDir, user, group string) (certPEM, keyPEM []byte, err error) {
	caCert, caKey, err := loadCA(pkiDir)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: user, Organization: []string{group}},
		NotBefore:    now.Add(-time.Minute), NotAfter: now.Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign client certificate: %w", err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// loadCA reads the cluster CA's certificate and key (PKCS#1, PKCS#8 or EC).
func loadCA(pkiDir string) (*x509.Certificate, any, error) {
	read := func(name string) (*pem.Block, error) {
		b, err := os.ReadFile(filepath.Join(pkiDir, name))
		if err != nil {
			return nil, fmt.Errorf("cluster CA: %w", err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("cluster CA: %s holds no PEM block", filepath.Join(pkiDir, name))
		}
		return blk, nil
	}
	cb, err := read("ca.crt")
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster CA certificate: %w", err)
	}
	kb, err := read("ca.key")
	if err != nil {
		return nil, nil, err
	}
	var key any
	switch kb.Type {
	case "RSA PRIVATE KEY":
		var k *rsa.PrivateKey
		k, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
		key = k
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cluster CA key (%s): %w", kb.Type, err)
	}
	return cert, key, nil
}

func ptr[T any](v T) *T { return &v }

// KwokRole is the sandbox's ClusterRole for the nodes' kwok processes, which
// run as their node (system:node:NAME, group system:nodes). kwok reads more
// broadly than a kubelet: at start it lists the Nodes (all of them, where the
// Node authorizer lets a node read only its own), and it keeps its node's
// Lease in an informer (list and watch, where a kubelet only GETs and updates
// it). The Node authorizer leaves both to RBAC, and this role grants exactly
// those reads; writes stay the Node authorizer's and NodeRestriction's, so a
// kwok still cannot change another node or delete another node's pod.
const KwokRole = "vigil-sandbox-kwok"

// applyKwokRBAC creates KwokRole and its binding to system:nodes. Idempotent.
func (s *Sandbox) applyKwokRBAC(ctx context.Context) error {
	meta := metav1.ObjectMeta{Name: KwokRole, Labels: map[string]string{"app.kubernetes.io/name": OwnObjectsName}}
	role := &rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}}}}
	if _, err := s.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole %s: %w", KwokRole, err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: meta,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: KwokRole},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}}}
	if _, err := s.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", KwokRole, err)
	}
	return nil
}
