package scale

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox"
)

// managerSA is the ServiceAccount the benchmark's manager runs as, so that the
// API server's audit log (Config.AuditLog records Vigil's ServiceAccounts) counts
// its requests apart from every other client's.
const managerSA = "vigil-manager"

// managerUser is the audit log's name for managerSA.
var managerUser = "system:serviceaccount:" + vigil.Namespace + ":" + managerSA

// managerKubeconfig creates managerSA, binds it to cluster-admin (what the
// manager may do is proven by the deploy tests; here only its request count
// matters) and writes a kubeconfig with a token of it.
func (w *world) managerKubeconfig(ctx context.Context, dir string) (string, error) {
	if err := sandbox.EnsureNamespace(ctx, w.c, vigil.Namespace); err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: vigil.Namespace, Name: managerSA}}
	if _, err := w.c.CoreV1().ServiceAccounts(vigil.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create ServiceAccount: %w", err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scale-bench-" + managerSA},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: vigil.Namespace, Name: managerSA}}}
	if _, err := w.c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create ClusterRoleBinding: %w", err)
	}
	hours := int64(12 * 3600)
	tok, err := w.c.CoreV1().ServiceAccounts(vigil.Namespace).CreateToken(ctx, managerSA,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hours}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s: %w", managerSA, err)
	}
	rc := w.sb.RESTConfig()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["scale"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData, CertificateAuthority: rc.CAFile}
	kc.AuthInfos[managerSA] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["scale"] = &clientcmdapi.Context{Cluster: "scale", AuthInfo: managerSA}
	kc.CurrentContext = "scale"
	path := filepath.Join(dir, "manager.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", err
	}
	return path, nil
}

// managerRequests counts, by verb and resource, the requests the manager made
// in [from, to], from the API server's audit log.
func (w *world) managerRequests(from, to time.Time) (map[string]float64, error) {
	evs, err := w.sb.AuditEvents()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, e := range evs {
		if e.User != managerUser || e.Time.Before(from) || e.Time.After(to) {
			continue
		}
		res := e.Resource
		if e.Subresource != "" {
			res += "/" + e.Subresource
		}
		out[e.Verb+" "+res]++
	}
	return out, nil
}

// sortedKeys is m's keys in order, for a stable report.
func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
