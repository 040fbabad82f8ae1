package sandbox_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/vigil-storage/vigil/sandbox"
)

// Bring up 3 nodes, run a process per node, power one node off and on again.
// (Needs root and `make testbin`; not run by go test.)
func ExampleUp() {
	ctx := context.Background()
	s, err := sandbox.Up(ctx, sandbox.Config{Nodes: 3, NodeMonitorGracePeriod: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Down()
	// A per-node process: runs in the node's network namespace, dies with the node.
	if err := s.AddProcess("", sandbox.ProcessSpec{Name: "agent",
		Args: []string{"sh", "-c", "exec sleep 100000 # $VIGIL_NODE $VIGIL_BOOT_ID"}}); err != nil {
		log.Fatal(err)
	}
	if err := s.Stop("node-2"); err != nil { // power cut
		log.Fatal(err)
	}
	if err := s.Start("node-2"); err != nil { // boots with a new boot id
		log.Fatal(err)
	}
	fmt.Println(s.Kubeconfig())
}

// A test workload: a StatefulSet of 2 on static driver.vigil.io volumes.
func ExampleWorkload_StatefulSet() {
	w := sandbox.Workload{Namespace: "demo", Name: "web", StorageClass: sandbox.StaticClaimClass, Spread: true}
	ss := w.StatefulSet(2)
	fmt.Println(ss.Name, *ss.Spec.Replicas, ss.Spec.VolumeClaimTemplates[0].Name, w.Selector())
	// Output: web 2 data app=web
}
