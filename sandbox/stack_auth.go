package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/devcerts"
)

// StackAuth is how the stack's callers prove who they are to its datapath.
type StackAuth string

const (
	// StackAuthTokenReview (the default): ServiceAccount tokens of
	// vigil-system (the manager's and the CSI controller's for the controller
	// role; the engines', each minted by TokenRequest bound to its Node), which
	// the datapath checks with TokenReview against the sandbox's API server.
	StackAuthTokenReview StackAuth = "tokenreview"
	// StackAuthStatic: a tokens file with a random token for the controller
	// role (one for the manager, one for the CSI controller) and one per node.
	StackAuthStatic StackAuth = "static"
)

// stackTokenLifetime is how long the sandbox's ServiceAccount tokens and
// certificates last.
const stackTokenLifetime = 24 * time.Hour

// NodeTokenFile is the datapath token of the engine of the node whose
// directory (VIGIL_NODE_DIR) is nodeDir: only that node's credential.
func NodeTokenFile(nodeDir string) string { return filepath.Join(nodeDir, "datapath.token") }

// RackTokensFile holds, on a scale sandbox, the datapath tokens of the nodes
// of the rack whose directory (VIGIL_NODE_DIR) is rackDir: a line
// `node NODE TOKEN` per node of the rack and nothing else, for the rack's
// heartbeat process (StackHeartbeat), which acts as each of them with its own
// token.
func RackTokensFile(rackDir string) string { return filepath.Join(rackDir, "datapath.tokens") }

// stackSecurity writes the stack's credentials: a CA and the datapath's
// certificate (for 127.0.0.1, every node link's host end and the IP of every
// node that runs a server; the servers on nodes share it), and one token per
// identity (cfg.Auth says how). It returns the datapath's flags for them.
func (s *Sandbox) stackSecurity(ctx context.Context, cfg StackConfig, stk *Stack, st *state) ([]string, error) {
	hosts := []string{"127.0.0.1", "localhost"}
	for _, n := range st.Nodes {
		hosts = append(hosts, n.HostIP)
	}
	for _, srv := range stk.DatapathServers {
		host, _, _ := net.SplitHostPort(srv.Address)
		hosts = append(hosts, host)
	}
	tlsDir := filepath.Join(stk.Dir, "tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	files, err := devcerts.WriteServerFiles(tlsDir, hosts, stackTokenLifetime)
	if err != nil {
		return nil, fmt.Errorf("stack: datapath certificate: %w", err)
	}
	stk.CAFile = files.CA
	args := []string{"--tls-cert-file", files.Cert, "--tls-private-key-file", files.Key}
	switch cfg.Auth {
	case StackAuthStatic:
		tokensFile, err := writeStaticTokens(stk, st, s.workDir)
		if err != nil {
			return nil, err
		}
		return append(args, "--token-file", tokensFile), nil
	case StackAuthTokenReview:
		if err := s.mintServiceAccountTokens(ctx, stk, st); err != nil {
			return nil, err
		}
		// The datapath's one API call, the TokenReview, is made as its own
		// identity of deploy/, which allows exactly that.
		kubeconfig, err := s.ComponentKubeconfig(ctx, vigil.DatapathServiceAccount, "")
		if err != nil {
			return nil, fmt.Errorf("stack: %w", err)
		}
		// A server on a node reaches the API server over its node's link
		// (datapathServerSpec points it there).
		for _, srv := range stk.DatapathServers {
			if _, err := s.ComponentKubeconfig(ctx, vigil.DatapathServiceAccount, srv.Node); err != nil {
				return nil, fmt.Errorf("stack: %w", err)
			}
		}
		args = append(args, "--kubeconfig", kubeconfig,
			"--controller-service-accounts", serviceAccount(vigil.ManagerServiceAccount)+","+serviceAccount(vigil.CSIControllerServiceAccount),
			"--engine-service-account", serviceAccount(vigil.EngineServiceAccount))
		if cfg.TokenReviewOutageGrace > 0 {
			args = append(args, "--token-review-outage-grace", cfg.TokenReviewOutageGrace.String())
		}
		return args, nil
	}
	return nil, fmt.Errorf("%w: StackConfig.Auth %q: want %q or %q", ErrInvalidConfig, cfg.Auth, StackAuthTokenReview, StackAuthStatic)
}

func serviceAccount(name string) string { return vigil.Namespace + ":" + name }

// writeStaticTokens makes a random token per identity, writes the datapath's
// tokens file and each caller's own file, and returns the tokens file.
func writeStaticTokens(stk *Stack, st *state, workDir string) (string, error) {
	random := func() string {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	manager, csi := random(), random()
	entries := []datapath.TokenEntry{{Token: manager}, {Token: csi}}
	files := map[string]string{stk.TokenFile: manager, stk.CSITokenFile: csi}
	err := writeNodeTokens(st, workDir, func(node string) (string, error) {
		tok := random()
		entries = append(entries, datapath.TokenEntry{Node: node, Token: tok})
		return tok, nil
	})
	if err != nil {
		return "", err
	}
	tokensFile := filepath.Join(stk.Dir, "datapath", "tokens")
	files[tokensFile] = strings.TrimSuffix(datapath.FormatTokens(entries), "\n")
	for path, content := range files {
		if err := writeSecret(path, content); err != nil {
			return "", err
		}
	}
	return tokensFile, nil
}

// writeNodeTokens gets a token of every Kubernetes node from token and writes
// it where its engine reads it: NodeTokenFile of the node's directory, or, on
// a scale sandbox, one RackTokensFile per rack with its nodes' tokens for the
// rack's heartbeat process.
func writeNodeTokens(st *state, workDir string, token func(node string) (string, error)) error {
	for _, n := range st.Nodes {
		var rack []datapath.TokenEntry
		for _, name := range n.k8sNodes() {
			tok, err := token(name)
			if err != nil {
				return err
			}
			rack = append(rack, datapath.TokenEntry{Node: name, Token: tok})
		}
		path, content := NodeTokenFile(n.dir(workDir)), rack[0].Token
		if len(n.Members) > 0 {
			path, content = RackTokensFile(n.dir(workDir)), strings.TrimSuffix(datapath.FormatTokens(rack), "\n")
		}
		if err := writeSecret(path, content); err != nil {
			return err
		}
	}
	return nil
}

// mintServiceAccountTokens creates vigil-system's ServiceAccounts and asks
// the API server for their tokens (audience vigil-datapath): the manager's
// and the CSI controller's, and one per engine bound to its Node, so that the
// API server names the node in every TokenReview of it.
func (s *Sandbox) mintServiceAccountTokens(ctx context.Context, stk *Stack, st *state) error {
	if err := EnsureNamespace(ctx, s.client, vigil.Namespace); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	for _, name := range []string{vigil.ManagerServiceAccount, vigil.CSIControllerServiceAccount, vigil.EngineServiceAccount} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vigil.Namespace}}
		if _, err := s.client.CoreV1().ServiceAccounts(vigil.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("stack: create ServiceAccount %s/%s: %w", vigil.Namespace, name, err)
		}
	}
	for path, name := range map[string]string{stk.TokenFile: vigil.ManagerServiceAccount, stk.CSITokenFile: vigil.CSIControllerServiceAccount} {
		tok, err := s.MintDatapathToken(ctx, name, nil)
		if err != nil {
			return err
		}
		if err := writeSecret(path, tok); err != nil {
			return err
		}
	}
	// One list for every Node's UID: a scale sandbox has hundreds.
	nodes, err := s.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("stack: list nodes: %w", err)
	}
	uids := map[string]types.UID{}
	for _, n := range nodes.Items {
		uids[n.Name] = n.UID
	}
	return writeNodeTokens(st, s.workDir, func(node string) (string, error) {
		uid, ok := uids[node]
		if !ok {
			return "", fmt.Errorf("stack: node %s: no Node object to bind its engine's token to", node)
		}
		return s.MintDatapathToken(ctx, vigil.EngineServiceAccount,
			&authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: uid})
	})
}

// MintDatapathToken asks the sandbox's API server for a token of the
// ServiceAccount vigil-system/name for the audience vigil-datapath, bound to
// obj when given (a Node: the token then names that node), valid for 24 h.
func (s *Sandbox) MintDatapathToken(ctx context.Context, name string, obj *authv1.BoundObjectReference) (string, error) {
	return s.MintToken(ctx, name, []string{vigil.DatapathTokenAudience}, obj, stackTokenLifetime)
}

// MintToken asks the API server for a token of the ServiceAccount
// vigil-system/name for audiences, bound to obj when given, valid for
// lifetime (the API server may shorten it).
func (s *Sandbox) MintToken(ctx context.Context, name string, audiences []string, obj *authv1.BoundObjectReference, lifetime time.Duration) (string, error) {
	secs := int64(lifetime / time.Second)
	tr, err := s.client.CoreV1().ServiceAccounts(vigil.Namespace).CreateToken(ctx, name, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		Audiences: audiences, ExpirationSeconds: &secs, BoundObjectRef: obj}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("stack: TokenRequest for %s/%s: %w", vigil.Namespace, name, err)
	}
	return tr.Status.Token, nil
}

func writeSecret(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
		return fmt.Errorf("stack: write %s: %w", path, err)
	}
	return nil
}
