package sandbox_test

import (
	"context"
	"fmt"

	"github.com/vigil-storage/vigil/sandbox"
)

// ExampleSandbox_StartStack runs Vigil's volume stack on a sandbox: claims of
// the "vigil" StorageClass are provisioned, attached, staged and published by
// the real components; Stop on a node is a power cut of its engine too.
func ExampleSandbox_StartStack() {
	ctx := context.Background()
	s, err := sandbox.Up(ctx, sandbox.Config{Nodes: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Down()
	stk, err := s.StartStack(ctx, sandbox.StackConfig{VigilBinDir: "bin"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("datapath", stk.DatapathAddr, "storage class", stk.StorageClass)
}
