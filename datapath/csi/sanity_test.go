package csi

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"
)

// sanityBackend is one datapath the upstream sanity suite runs against.
type sanityBackend struct {
	name  string
	start func(t *testing.T) Volumes
}

// TestSanity runs the upstream csi-test sanity suite in-process against the CSI
// server over a real unix socket, once per backend (the in-memory double and
// the real datapath server, listed in sanityBackends) and access type (mount
// and block). Ginkgo runs
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
		for _, accessType := range []string{"mount", "block"} {
			endpoint := serveForSanity(t, b.start(t))
			dir := shortTempDir(t)
			cfg := sanity.NewTestConfig()
			cfg.Address = endpoint
			cfg.TargetPath = filepath.Join(dir, "target")
			cfg.StagingPath = filepath.Join(dir, "staging")
			cfg.TestVolumeSize = 64 << 20
			cfg.TestVolumeAccessType = accessType
			Describe(b.name+", "+accessType, func() {
				ctxs = append(ctxs, sanity.GinkgoTest(&cfg))
			})
		}
	}
	skips := map[string][]string{} // skip message -> specs
	passed := 0
	ReportAfterEach(func(r SpecReport) {
		switch r.State {
		case types.SpecStateSkipped:
			msg := r.Failure.Message
			skips[msg] = append(skips[msg], r.FullText())
		case types.SpecStatePassed:
			passed++
		}
	})
	RegisterFailHandler(Fail)
	RunSpecs(t, "Vigil CSI sanity")
	for _, sc := range ctxs {
		sc.Finalize()
	}
	checkSanitySkips(t, skips, passed)
}

// unexpectedSkips are skip messages that would mean Vigil lost something the
// sanity suite should exercise.
var unexpectedSkips = []string{
	"capacity of the volume is unknown",
	"Required bytes not supported",
	"Controller Service not provided",
	"NodeStageVolume not supported",
	"NodeUnstageVolume not supported",
	"GetCapacity not supported",
	"ListVolumes not supported",
	"CreateVolume not supported",
	"DeleteVolume not supported",
	"ControllerPublishVolume not supported",
	"ControllerUnpublishVolume not supported",
}

// checkSanitySkips logs which specs sanity skipped and why, and fails if one was
// skipped for a reason that means a capability went missing.
func checkSanitySkips(t *testing.T, skips map[string][]string, passed int) {
	t.Helper()
	msgs := make([]string, 0, len(skips))
	for m := range skips {
		msgs = append(msgs, m)
	}
	sort.Strings(msgs)
	t.Logf("sanity: %d specs passed across %d backends, mount and block each", passed, len(sanityBackends()))
	for _, m := range msgs {
		t.Logf("skipped %d specs: %s", len(skips[m]), m)
		for _, bad := range unexpectedSkips {
			if strings.Contains(m, bad) {
				t.Errorf("sanity skipped %q: %v", m, skips[m])
			}
		}
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
