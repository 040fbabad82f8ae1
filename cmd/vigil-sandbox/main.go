// Command vigil-sandbox runs the local Kubernetes sandbox of package sandbox: a
// real control plane with simulated nodes that can be powered off and cut off.
package main

import (
	"fmt"
	"os"

	"github.com/vigil-storage/vigil/internal/cliflags"
)

func main() {
	if err := cliflags.Run(app(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "vigil-sandbox:", err)
		os.Exit(1)
	}
}
