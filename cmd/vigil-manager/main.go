// Command vigil-manager is Vigil's manager; see package manager.
package main

import (
	"fmt"
	"os"

	"github.com/vigil-storage/vigil/internal/cliflags"
	"github.com/vigil-storage/vigil/manager"
)

func main() {
	if err := cliflags.Run(manager.App(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "vigil-manager:", err)
		os.Exit(cliflags.ExitCode(err))
	}
}
