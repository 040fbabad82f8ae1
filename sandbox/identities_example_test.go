package sandbox_test

import (
	"context"
	"fmt"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox"
)

// ExampleSandbox_ComponentKubeconfig runs a component as it runs on a real
// cluster: under its ServiceAccount and role of deploy/, never the admin's
// credential; an engine's token is bound to its Node.
func ExampleSandbox_ComponentKubeconfig() {
	ctx := context.Background()
	s, err := sandbox.Up(ctx, sandbox.Config{Nodes: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Down()
	if err := s.ApplyDeployRBAC(ctx); err != nil {
		fmt.Println(err)
		return
	}
	manager, err := s.ComponentKubeconfig(ctx, vigil.ManagerServiceAccount, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	engine, _ := s.ComponentKubeconfig(ctx, vigil.EngineServiceAccount, "node-1")
	kubelet, _ := s.NodeKubeconfig("node-1")
	fmt.Println("vigil-manager run --kubeconfig", manager)
	fmt.Println("vigil-engine-node run --kubeconfig", engine)
	fmt.Println("the kubelet of node-1:", kubelet)
}

// ExampleLeftovers checks that a removed sandbox left nothing behind.
func ExampleLeftovers() {
	workDir := sandbox.DefaultWorkDir("example")
	_ = sandbox.DownWorkDir(workDir)
	left, err := sandbox.Leftovers("example", workDir)
	fmt.Println(left, err)
	// Output: [] <nil>
}
