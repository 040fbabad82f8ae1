package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/tokenreview"
	"github.com/vigil-storage/vigil/sandbox"
)

// TestDatapathAuth_TokenReview runs a datapath whose callers prove who they
// are with ServiceAccount tokens, checked by TokenReview against the
// sandbox's real API server (the tokens minted by TokenRequest): the
// manager's token is the controller; an engine token bound to node-1 is
// node-1's engine and nothing else; a token for another audience, one of a
// ServiceAccount without a role, an engine token bound to no node, one whose
// bound object was deleted and one past its expiry are all refused.
func TestDatapathAuth_TokenReview(t *testing.T) {
	ctx := context.Background()
	c := sb.Client()
	must(t, sandbox.EnsureNamespace(ctx, c, vigil.Namespace))
	for _, name := range []string{vigil.ManagerServiceAccount, vigil.EngineServiceAccount, "not-vigil"} {
		_, err := c.CoreV1().ServiceAccounts(vigil.Namespace).Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vigil.Namespace}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	node1 := sandbox.NodeName(0)
	n1, err := c.CoreV1().Nodes().Get(ctx, node1, metav1.GetOptions{})
	must(t, err)
	mint := func(sa string, aud string, obj *authv1.BoundObjectReference) string {
		t.Helper()
		tok, err := sb.MintToken(ctx, sa, []string{aud}, obj, time.Hour)
		must(t, err)
		return tok
	}
	aud := vigil.DatapathTokenAudience
	managerTok := mint(vigil.ManagerServiceAccount, aud, nil)
	engineTok := mint(vigil.EngineServiceAccount, aud, &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n1.Name, UID: n1.UID})
	kubeAPITok := mint(vigil.EngineServiceAccount, "https://kubernetes.default.svc", &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n1.Name, UID: n1.UID})
	unboundTok := mint(vigil.EngineServiceAccount, aud, nil)
	strangerTok := mint("not-vigil", aud, nil)
	secret, err := c.CoreV1().Secrets(vigil.Namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "bound-"}}, metav1.CreateOptions{})
	must(t, err)
	revokedTok := mint(vigil.ManagerServiceAccount, aud, &authv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: secret.Name, UID: secret.UID})

	newAuth := func(now func() time.Time) *tokenreview.Authenticator {
		t.Helper()
		a, err := tokenreview.New(tokenreview.Config{Reviewer: c.AuthenticationV1().TokenReviews(),
			Controllers: []tokenreview.ServiceAccount{{Namespace: vigil.Namespace, Name: vigil.ManagerServiceAccount}},
			Engines:     []tokenreview.ServiceAccount{{Namespace: vigil.Namespace, Name: vigil.EngineServiceAccount}},
			OutageGrace: time.Minute, Now: now})
		must(t, err)
		return a
	}
	auth := newAuth(nil)
	srv := datapathtest.StartWith(t, datapathtest.Config{TLS: true, Auth: auth})
	dial := func(tok string) *dpclient.Client {
		t.Helper()
		dp, err := dpclient.Dial(ctx, srv.Addr, tok, dpclient.WithCAFile(srv.CAFile), dpclient.WithRetries(0))
		must(t, err)
		t.Cleanup(func() { _ = dp.Close() })
		return dp
	}

	ctl, engine := dial(managerTok), dial(engineTok)
	v, err := ctl.CreateVolume(ctx, "pvc-auth", 1<<20, datapath.AccessRWO)
	must(t, err)
	e, err := ctl.Grant(ctx, v.ID, node1)
	must(t, err)
	if err := engine.WriteAt(ctx, v.ID, node1, e, 0, make([]byte, 256<<10)); err != nil {
		t.Fatalf("node-1's engine writes as node-1 (bulk): %v", err)
	}
	if err := engine.Heartbeat(ctx, node1); err != nil {
		t.Fatalf("node-1's engine heartbeats: %v", err)
	}
	for what, err := range map[string]error{
		"heartbeat as node-2": engine.Heartbeat(ctx, sandbox.NodeName(1)),
		"write as node-2":     engine.WriteAt(ctx, v.ID, sandbox.NodeName(1), e, 0, []byte("x")),
		"fence node-1":        second(engine.Fence(ctx, v.ID, node1)),
		"grant":               second(engine.Grant(ctx, v.ID, sandbox.NodeName(1))),
	} {
		if !errors.Is(err, datapath.ErrPermissionDenied) {
			t.Errorf("node-1's engine token: %s: %v; want ErrPermissionDenied", what, err)
		}
	}

	must(t, c.CoreV1().Secrets(vigil.Namespace).Delete(ctx, secret.Name, metav1.DeleteOptions{}))
	for _, tc := range []struct {
		name, token string
		want        error
		mention     string
	}{
		{"another audience", kubeAPITok, datapath.ErrUnauthenticated, "audience"},
		{"engine token bound to no node", unboundTok, datapath.ErrPermissionDenied, "names no single node"},
		{"ServiceAccount without a role", strangerTok, datapath.ErrPermissionDenied, "not-vigil has no datapath role"},
		{"bound object deleted", revokedTok, datapath.ErrUnauthenticated, "refused the token"},
		{"not a token", "not-a-token-at-all", datapath.ErrUnauthenticated, "refused the token"},
	} {
		err := dial(tc.token).Heartbeat(ctx, node1)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v; want %v mentioning %q", tc.name, err, tc.want, tc.mention)
		}
	}

	// Past its expiry (the authenticator's clock moved past the token's exp
	// claim: the API server would not mint one that lives under 10 minutes),
	// the engine's real token is refused without asking the API server.
	later := newAuth(func() time.Time { return time.Now().Add(2 * time.Hour) })
	if _, err := later.Authenticate(ctx, engineTok); !errors.Is(err, datapath.ErrUnauthenticated) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("node-1's token two hours on: %v; want ErrUnauthenticated (expired)", err)
	}
	if later.Reviews() != 0 {
		t.Errorf("an expired token was sent for review")
	}
	t.Logf("TokenReviews made by the server: %d", auth.Reviews())
}
