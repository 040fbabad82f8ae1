package enginenode

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/vigil-storage/vigil/datapath"
	vcsi "github.com/vigil-storage/vigil/datapath/csi"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

const sanityNode = "sanity-node"

// startRealDatapath starts a datapath server and returns a client for it that
// makes each call as production would: I/O as the node's engine, the rest as
// the controller.
func startRealDatapath(t testing.TB) *datapathtest.Roles {
	t.Helper()
	c, _ := startRealDatapathServer(t)
	return c
}

// startRealDatapathServer starts a datapath server and returns a client for
// it (calls as production makes them: I/O as the node's engine, the rest as
// the controller) and the server, whose Store shows what reached its disk.
func startRealDatapathServer(t testing.TB) (*datapathtest.Roles, *datapathtest.Server) {
	t.Helper()
	srv := datapathtest.StartWith(t, datapathtest.Config{Options: datapath.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		BootID: "real-datapath-boot"})
	return srv.DialRoles(t), srv
}

// serveCSI serves identity, the real controller and this node service on a
// fresh unix socket and returns the endpoint.
func serveCSI(t *testing.T, dp vcsi.Volumes, node *NodeServer) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vsan") // a socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	nodes := vcsi.NodesFunc(func(_ context.Context, id string) (bool, error) { return id == sanityNode, nil })
	srv := vcsi.NewServer(dp, vcsi.WithNodes(nodes), vcsi.WithNodeService(node), vcsi.WithLogger(quiet))
	endpoint := "unix://" + filepath.Join(dir, "csi.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, endpoint) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("serve CSI: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("CSI server did not listen within 5s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve CSI: %v", err)
		}
	})
	return endpoint
}

// TestSanity runs the upstream csi-test sanity suite against Vigil's real CSI
// controller (datapath/csi over a real datapath server) and this package's real
// node service (FUSE, loop device, ext4, bind mounts) with its production
// stage gate, for mount and block access, and fails if a node spec is skipped
// for a missing capability.
func TestSanity(t *testing.T) {
	requireRealStack(t)
	if testing.Short() {
		t.Skip("sanity takes several seconds; skipped in -short mode")
	}
	var ctxs []*sanity.TestContext
	for _, access := range []string{"mount", "block"} {
		dp := startRealDatapath(t)
		node := newTestServer(t, dp, sanityNode)
		// The production gate: every stage must carry this node's live grant.
		gate := &FenceCleaner{Node: sanityNode, Server: node, Grants: dp, Metrics: node.metrics, Log: quiet,
			Recorder: record.NewFakeRecorder(10),
			Client:   fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: sanityNode}})}
		if err := gate.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		node.cfg.Gate = gate
		endpoint := serveCSI(t, dp, node)
		dir, err := os.MkdirTemp("", "vsan")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		cfg := sanity.NewTestConfig()
		cfg.Address = endpoint
		cfg.TargetPath = filepath.Join(dir, "target")
		cfg.StagingPath = filepath.Join(dir, "staging")
		cfg.TestVolumeSize = 64 << 20
		cfg.TestVolumeAccessType = access
		Describe("vigil "+access, func() { ctxs = append(ctxs, sanity.GinkgoTest(&cfg)) })
	}
	var skipped []string
	passed := 0
	ReportAfterEach(func(r SpecReport) {
		switch r.State {
		case types.SpecStateSkipped:
			skipped = append(skipped, r.FullText()+": "+r.Failure.Message)
		case types.SpecStatePassed:
			passed++
		}
	})
	RegisterFailHandler(Fail)
	RunSpecs(t, "Vigil CSI sanity with the real node service")
	for _, c := range ctxs {
		c.Finalize()
	}
	t.Logf("sanity: %d specs passed, %d skipped", passed, len(skipped))
	for _, s := range skipped {
		t.Logf("skipped: %s", s)
		for _, missing := range []string{"NodeStageVolume not supported", "NodeUnstageVolume not supported", "NodeGetVolumeStats not supported", "Node Service not provided"} {
			if strings.Contains(s, missing) {
				t.Errorf("a node spec was skipped: %s", s)
			}
		}
	}
}
