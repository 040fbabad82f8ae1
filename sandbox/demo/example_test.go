package demo_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/vigil-storage/vigil/sandbox/demo"
)

// Run the demo's auto mode, as `make run DEMO=auto` does (as root, after
// `make testbin` and `make build`).
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := demo.Run(ctx, demo.Config{VigilBinDir: "bin", Auto: true, Listen: "127.0.0.1:0"})
	fmt.Println("demo:", err)
}
