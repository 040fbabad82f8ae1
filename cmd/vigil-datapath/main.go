// Command vigil-datapath is Vigil's datapath volume server; see package
// datapath for what it guarantees and manager.DatapathApp for its commands.
package main

import (
	"fmt"
	"os"

	"github.com/vigil-storage/vigil/internal/cliflags"
	"github.com/vigil-storage/vigil/manager"
)

func main() {
	if err := cliflags.Run(manager.DatapathApp(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, manager.DatapathBinary+":", err)
		os.Exit(cliflags.ExitCode(err))
	}
}
