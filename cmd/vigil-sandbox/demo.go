package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/demo"
)

// demoCommand is `vigil-sandbox demo [--auto]`, what `make run` runs.
func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "Vigil's live demo: a 3-node sandbox of real nodes with Vigil's stack and vigil-manager, a StatefulSet whose container writes to its volume; runs until Ctrl-C, then removes everything",
		Description: "By default each node is a real node (a kubelet, containerd, a CNI bridge and kube-proxy; needs root and Debian's\n" +
			"containerd, runc, nftables and containernetworking-plugins), and the demo first builds the images they import\n" +
			"(pause, writer, tools) here without a container engine, compiling the pause and writer programs from --source.\n" +
			"--kubelet kwok runs a kwok process per node instead, for a machine without containerd: no container runs,\n" +
			"the writer is a process of the node.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "auto", Usage: "cut the power of the demo pod's node once all runs, print the recovery, and exit 0 once the replacement runs with its data"},
			&cli.StringFlag{Name: "listen", Value: vigil.DefaultAPIAddress, Usage: "the manager's UI, REST API and metrics (a loopback address; port 0: any free port)"},
			&cli.StringFlag{Name: "subnet", Value: "10.213.0.0/16", Usage: "addresses of the node links"},
			&cli.StringFlag{Name: "kubelet", Value: sandbox.KubeletReal, Usage: "what runs each node: real (a kubelet, containerd, CNI and kube-proxy) or kwok (a kwok process, no containers)"},
			&cli.StringFlag{Name: "pod-subnet", Usage: "with --kubelet real: pod addresses, a /24 per node", DefaultText: sandbox.DefaultPodSubnet},
			&cli.StringFlag{Name: "source", Usage: "with --kubelet real: Vigil's source tree, where the pause and writer images' programs are compiled",
				DefaultText: "the parent of --vigil-bin-dir"},
			&cli.DurationFlag{Name: "timeout", Value: demo.DefaultTimeout, Usage: "--auto: longest time from the power cut to the replacement with its data"},
			&cli.StringFlag{Name: "bin-dir", Usage: "binaries from `make testbin` (default: the pinned cache)"},
			&cli.StringFlag{Name: "vigil-bin-dir", Usage: "Vigil's binaries of `make build` (default: this binary's directory)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("demo takes no arguments, got %q", c.Args().Slice())
			}
			bin := c.String("vigil-bin-dir")
			if bin == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--vigil-bin-dir not given and this binary's path is unknown: %w", err)
				}
				bin = filepath.Dir(exe)
			}
			cliName := os.Args[0]
			if c.IsSet("name") {
				cliName += " --name " + c.String("name")
			}
			if c.IsSet("workdir") {
				cliName += " --workdir " + c.String("workdir")
			}
			// Ctrl-C ends the demo; a second one during the teardown is caught too,
			// so that the teardown always completes.
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return demo.Run(ctx, demo.Config{Name: c.String("name"), WorkDir: workDir(c), Subnet: c.String("subnet"),
				BinDir: c.String("bin-dir"), VigilBinDir: bin, Listen: c.String("listen"), Auto: c.Bool("auto"),
				Timeout: c.Duration("timeout"), CLI: cliName, Out: c.App.Writer,
				Kubelet: c.String("kubelet"), PodSubnet: c.String("pod-subnet"), SourceDir: c.String("source")})
		},
	}
}
