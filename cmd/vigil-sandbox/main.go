// Command vigil-sandbox runs the local Kubernetes sandbox of package sandbox: a
// real control plane with simulated nodes that can be powered off and cut off.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := app().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "vigil-sandbox:", err)
		os.Exit(1)
	}
}
