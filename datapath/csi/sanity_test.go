package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// sanityBackend is one datapath the upstream sanity suite runs against.
type sanityBackend struct {
	name  string
	start func(t *testing.T) Volumes
}

// TestSanity runs the upstream csi-test sanity suite in-process against the CSI
// server over a real unix socket, once per backend: the in-memory double and
// the real datapath server (backends are listed in sanityBackends). Ginkgo runs
// its specs once per process, so every backend is registered as a container of
// one suite.
//
// The node service is the stubNode of this package (the real one belongs to the
// engine-node): it advertises STAGE_UNSTAGE_VOLUME only, so sanity runs the
// NodeGetInfo, NodeGetCapabilities, NodeStage/Unstage and NodePublish/Unpublish
// argument checks, "should remove target path" and the node "should work" and
// "should be idempotent" lifecycles, and itself skips, by capability: the
// SINGLE_NODE_MULTI_WRITER node publish test, NodeGetVolumeStats,
// NodeExpandVolume, NodeGetVolumeHealth and NodeGetStorageHealth. On the
// controller side it skips what Vigil does not offer: snapshots, cloning,
// expansion, modification (volume attribute classes), the PUBLISH_READONLY
// incompatibility test, the node attach limit test (TestNodeVolumeAttachLimit is
// off; Vigil sets no limit) and ControllerGetVolume / volume health.
func TestSanity(t *testing.T) {
	if testing.Short() {
		t.Skip("the sanity suite takes a few seconds; skipped in -short mode")
	}
	ctxs := []*sanity.TestContext{}
	for _, b := range sanityBackends() {
		endpoint := serveForSanity(t, b.start(t))
		dir := shortTempDir(t)
		cfg := sanity.NewTestConfig()
		cfg.Address = endpoint
		cfg.TargetPath = filepath.Join(dir, "target")
		cfg.StagingPath = filepath.Join(dir, "staging")
		cfg.TestVolumeSize = 64 << 20
		Describe(b.name, func() {
			ctxs = append(ctxs, sanity.GinkgoTest(&cfg))
		})
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "Vigil CSI sanity")
	for _, sc := range ctxs {
		sc.Finalize()
	}
}

// serveForSanity serves identity, controller and the stub node service for
// volumes on a fresh socket and returns its endpoint.
func serveForSanity(t *testing.T, volumes Volumes) string {
	t.Helper()
	nodes := NodesFunc(func(_ context.Context, id string) (bool, error) { return id == stubNodeID, nil })
	srv := NewServer(volumes, WithNodes(nodes), WithNodeService(stubNode{}), WithLogger(discardLogger()))
	return serve(t, srv)
}

// shortTempDir is a temporary directory with a short path: a unix socket path
// must fit in 108 bytes, which t.TempDir's long names can exceed.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vcsi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
