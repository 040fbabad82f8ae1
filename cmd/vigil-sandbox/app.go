package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/heartbeat"
	"github.com/vigil-storage/vigil/sandbox/images"
	"github.com/vigil-storage/vigil/sandbox/kubelet"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

func app() *cli.App {
	return &cli.App{
		Name:            "vigil-sandbox",
		Usage:           "a local Kubernetes cluster whose nodes can be powered off and cut off",
		Version:         vigil.Version,
		ExitErrHandler:  func(*cli.Context, error) {},
		HideHelpCommand: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "name", Value: "vigil", EnvVars: []string{"VIGIL_SANDBOX_NAME"},
				Usage: "sandbox (kwokctl cluster) name"},
			&cli.StringFlag{Name: "workdir", EnvVars: []string{"VIGIL_SANDBOX_DIR"},
				Usage: "state directory (default $TMPDIR/vigil-sandbox-NAME)"},
		},
		Commands: []*cli.Command{upCommand(), downCommand(), statusCommand(), nodeCommand(), kubeconfigCommand(), demoCommand(),
			kubelet.Command(), ledger.Command(), heartbeat.Command(), powerfsCommand(), imagesCommand(), junitSummaryCommand()},
	}
}

func workDir(c *cli.Context) string {
	if d := c.String("workdir"); d != "" {
		return d
	}
	return sandbox.DefaultWorkDir(c.String("name"))
}

func upCommand() *cli.Command {
	return &cli.Command{
		Name:  "up",
		Usage: "create the cluster and its nodes; returns when every node is Ready",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nodes", Value: 3, Usage: "number of nodes (1 to 64; 0 with --racks)"},
			&cli.IntFlag{Name: "racks", Usage: "a scale sandbox: this many racks (1 to 20), each one kwok running --rack-size nodes"},
			&cli.IntFlag{Name: "rack-size", Value: 50, Usage: "nodes per rack (1 to 100) with --racks"},
			&cli.StringFlag{Name: "kubelet", Value: sandbox.KubeletKwok, Usage: "what runs each node: " +
				"kwok (one kwok process per node plays its kubelet; no container runs; the default, and the only one with --racks) or " +
				"real (a real kubelet, containerd, CNI bridge and kube-proxy per node: pods run in containers; needs root, " +
				"containerd, runc, nftables and containernetworking-plugins from Debian, and --node-image and --pause-image)"},
			&cli.StringSliceFlag{Name: "node-image", Usage: "with --kubelet real: an image tarball (docker-archive or OCI) to import into every node's containerd; repeat it " +
				"(default: the pause and tools images `make image` wrote into the images directory beside this binary)"},
			&cli.StringFlag{Name: "pause-image", Usage: "with --kubelet real: the reference of the image, among --node-image, that holds each pod's sandbox (default: the pause image tagged dev)"},
			&cli.StringFlag{Name: "pod-subnet", Value: sandbox.DefaultPodSubnet, Usage: "with --kubelet real: pod addresses, a /24 per node"},
			&cli.DurationFlag{Name: "node-monitor-grace-period", Value: 10 * time.Second,
				Usage: "how long a silent node stays Ready"},
			&cli.DurationFlag{Name: "node-monitor-period", Value: time.Second, Usage: "how often node health is checked"},
			&cli.IntFlag{Name: "toleration-seconds", Value: 20,
				Usage: "default unreachable/not-ready NoExecute toleration injected into pods"},
			&cli.StringFlag{Name: "subnet", Value: "10.213.0.0/16", Usage: "addresses of the node links"},
			&cli.IntFlag{Name: "port", Usage: "API server port (default: a free one)"},
			&cli.StringFlag{Name: "bin-dir", Usage: "binaries from `make testbin` (default: the pinned cache)"},
			&cli.BoolFlag{Name: "stack", Usage: "also run Vigil's volume stack (datapath, CSI controller and sidecars on the host; an engine per node, " +
				"with a kubelet stand-in on kwok nodes; on real nodes the engine is the real kubelet's CSI node plugin, and --kubelet real imports the writer image too)"},
			&cli.StringFlag{Name: "vigil-bin-dir", Usage: "Vigil's binaries for --stack (default: this binary's directory)"},
			&cli.IntFlag{Name: "datapath-servers", Usage: "with --stack: run N datapath servers in one control group, one a process of each of the first N nodes " +
				"(in the node's network namespace on its IP, its data under the node's directory, killed by the node's power cut, cut off by its partition), " +
				"as on a hyperconverged cluster; N is odd, at most --nodes (2 servers need both for a majority, so they cannot lose one). " +
				"0 runs one server on the host instead, which no node's power cut or partition reaches: give --datapath-servers 0 to cut a " +
				"writer's node and keep its volume, since a volume's data has one copy, on one server, and a server on the cut node takes " +
				"the volumes it holds with it",
				DefaultText: "3 with 3 or more nodes; 0, the host server, with 1 or 2 nodes (a group of 1 or 2 survives no server's loss) or with --racks"},
			&cli.StringFlag{Name: "datapath-auth", Value: string(sandbox.StackAuthTokenReview),
				Usage: "how --stack's callers prove who they are to the datapath: tokenreview (ServiceAccount tokens, the engines' bound to their Node) or static (a tokens file)"},
			&cli.BoolFlag{Name: "install", Usage: "with --kubelet real: install Vigil from deploy/ (kubectl apply -k deploy/overlays/sandbox, through the API) " +
				"with the images of `make image`, which every node imports (default --node-image: every tarball of the images directory beside this binary), " +
				"and wait until every component is Ready, saying what each waits on"},
			&cli.StringFlag{Name: "install-dir", Usage: "with --install: a kustomization directory to apply instead of deploy/overlays/sandbox (built into this binary)"},
			&cli.DurationFlag{Name: "install-timeout", Value: sandbox.DefaultInstallTimeout, Usage: "with --install: how long to wait for every component"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("up takes no arguments, got %q", c.Args().Slice())
			}
			switch auth := sandbox.StackAuth(c.String("datapath-auth")); {
			case auth != sandbox.StackAuthTokenReview && auth != sandbox.StackAuthStatic:
				return fmt.Errorf("--datapath-auth %q: want %s or %s", auth, sandbox.StackAuthTokenReview, sandbox.StackAuthStatic)
			case c.IsSet("datapath-auth") && !c.Bool("stack"):
				return fmt.Errorf("--datapath-auth is for --stack's datapath; give --stack too")
			case c.IsSet("datapath-servers") && !c.Bool("stack"):
				return fmt.Errorf("--datapath-servers is for --stack's datapath; give --stack too")
			}
			if _, err := datapathServers(c); err != nil {
				return err
			}
			if err := checkKubeletFlags(c); err != nil {
				return err
			}
			if err := checkInstallFlags(c); err != nil {
				return err
			}
			nodeImages, pauseImage, err := realNodeImages(c)
			if err != nil {
				return err
			}
			nodes, rackSize := c.Int("nodes"), 0
			if c.Int("racks") != 0 {
				if rackSize = c.Int("rack-size"); rackSize < 1 {
					return fmt.Errorf("%w: --rack-size %d: want 1 to %d", sandbox.ErrInvalidConfig, rackSize, sandbox.MaxRackSize)
				}
				if !c.IsSet("nodes") {
					nodes = 0
				}
			}
			t0 := time.Now()
			s, err := sandbox.Up(c.Context, sandbox.Config{
				Name: c.String("name"), WorkDir: workDir(c), BinDir: c.String("bin-dir"), Nodes: nodes,
				Racks: c.Int("racks"), RackSize: rackSize,
				NodeMonitorGracePeriod:   c.Duration("node-monitor-grace-period"),
				NodeMonitorPeriod:        c.Duration("node-monitor-period"),
				DefaultTolerationSeconds: c.Int("toleration-seconds"), Subnet: c.String("subnet"),
				APIServerPort: c.Int("port"),
				Kubelet:       c.String("kubelet"), NodeImages: nodeImages,
				PauseImage: pauseImage, PodSubnet: c.String("pod-subnet"),
				Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
			})
			if err != nil {
				return err
			}
			if c.Bool("stack") {
				if err := startStack(c, s); err != nil {
					return err
				}
			}
			fmt.Printf("sandbox up in %.1fs\n", time.Since(t0).Seconds())
			if c.Bool("install") {
				if err := install(c, s, t0); err != nil {
					return err
				}
			}
			return printStatus(c.Context, s)
		},
	}
}

// defaultGroupServers is --datapath-servers when not given on a sandbox of
// at least as many nodes: the smallest group that survives one server's loss.
const defaultGroupServers = 3

// defaultDatapathServers is --datapath-servers when not given: a group of
// defaultGroupServers on a sandbox of at least that many nodes, else 0 (the
// host server). Below 3 nodes a group cannot survive a loss (one server, or
// two that both make the majority), so a power cut of a server's node would
// stop every volume; the host server keeps a small sandbox's volumes across
// every node cut. A scale sandbox (racks) runs no servers on nodes.
func defaultDatapathServers(nodes int, racks bool) int {
	if racks || nodes < defaultGroupServers {
		return 0
	}
	return defaultGroupServers
}

// datapathServers is up's count of datapath servers on nodes: with --stack
// the flag if given, else its default for --nodes, checked against the
// sandbox's nodes; without --stack 0 (no datapath runs).
func datapathServers(c *cli.Context) (int, error) {
	if !c.Bool("stack") {
		return 0, nil
	}
	nodes, racks := c.Int("nodes"), c.Int("racks") != 0
	servers := defaultDatapathServers(nodes, racks)
	if c.IsSet("datapath-servers") {
		servers = c.Int("datapath-servers")
	}
	if err := sandbox.CheckDatapathServers(servers, nodes, racks); err != nil {
		return 0, fmt.Errorf("--datapath-servers: %w", err)
	}
	return servers, nil
}

// checkKubeletFlags refuses the real-node flags without --kubelet real, and
// an unknown --kubelet, before anything is created.
func checkKubeletFlags(c *cli.Context) error {
	switch k := c.String("kubelet"); k {
	case sandbox.KubeletReal:
		return nil
	case sandbox.KubeletKwok:
		for _, f := range []string{"node-image", "pause-image", "pod-subnet"} {
			if c.IsSet(f) {
				return fmt.Errorf("--%s is for real nodes: give --kubelet %s too", f, sandbox.KubeletReal)
			}
		}
		return nil
	default:
		return fmt.Errorf("%w: --kubelet %q: want %s or %s", sandbox.ErrInvalidConfig, k, sandbox.KubeletKwok, sandbox.KubeletReal)
	}
}

// realNodeImages is what --kubelet real imports into its nodes: --node-image
// and --pause-image, or by default the pause and tools images of `make image`
// (bin/images beside this binary; with --stack the writer image too; with
// --install every image there, and the vigil image must be among them) and the
// pause image's reference.
func realNodeImages(c *cli.Context) ([]string, string, error) {
	files, pause := c.StringSlice("node-image"), c.String("pause-image")
	if c.String("kubelet") != sandbox.KubeletReal {
		return files, pause, nil
	}
	if !c.IsSet("node-image") {
		exe, err := os.Executable()
		if err != nil {
			return nil, "", err
		}
		dir := filepath.Join(filepath.Dir(exe), "images")
		required := []string{images.Pause, images.Tools}
		if c.Bool("stack") {
			required = append(required, images.Writer) // pods that write to Vigil volumes, in real containers
		}
		if c.Bool("install") {
			required = append(required, images.Vigil)
			all, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
			for _, f := range all {
				if n := strings.TrimSuffix(filepath.Base(f), ".tar"); !slices.Contains(required, n) {
					files = append(files, f)
				}
			}
		}
		for _, name := range required {
			f := filepath.Join(dir, name+".tar")
			if _, err := os.Stat(f); err != nil {
				return nil, "", fmt.Errorf("%w: --kubelet real imports the %s image, and %s is not there: run `make image`, or give --node-image",
					sandbox.ErrInvalidConfig, name, f)
			}
			files = append(files, f)
		}
	}
	if !c.IsSet("pause-image") {
		var err error
		if pause, err = images.Ref(images.Pause, "dev", nil); err != nil {
			return nil, "", err
		}
	}
	return files, pause, nil
}

func downCommand() *cli.Command {
	return &cli.Command{
		Name:  "down",
		Usage: "remove every process, namespace, veth and file of the sandbox (safe to repeat)",
		Action: func(c *cli.Context) error {
			if err := sandbox.DownWorkDir(workDir(c)); err != nil {
				return err
			}
			fmt.Println("sandbox down")
			return nil
		},
	}
}

func open(c *cli.Context) (*sandbox.Sandbox, error) {
	s, err := sandbox.Open(workDir(c))
	if errors.Is(err, sandbox.ErrNotUp) {
		return nil, fmt.Errorf("%w: run `vigil-sandbox up` first", err)
	}
	return s, err
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the nodes, their state, the kubeconfig and what runs on each node",
		Action: func(c *cli.Context) error {
			s, err := open(c)
			if err != nil {
				return err
			}
			return printStatus(c.Context, s)
		},
	}
}

func printStatus(ctx context.Context, s *sandbox.Sandbox) error {
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("sandbox %s  api %s  kubeconfig %s\n", st.Name, st.APIServer, st.Kubeconfig)
	if st.APIError != "" {
		fmt.Printf("API server: %s\n", st.APIError)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tSTATE\tREADY\tIP\tTAINTS\tPROCESSES")
	for _, n := range st.Nodes {
		var ps []string
		for _, p := range n.Processes {
			run := "dead"
			if p.Running {
				run = fmt.Sprintf("pid %d", p.PID)
			}
			ps = append(ps, fmt.Sprintf("%s(%s)", p.Name, run))
		}
		ready := n.Ready
		if ready == "" {
			ready = "?"
		}
		taints := strings.Join(n.Taints, ",")
		if taints == "" {
			taints = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.State(), ready, n.NodeIP, taints, strings.Join(ps, " "))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return printDatapathServers(ctx, os.Stdout, s)
}

// printDatapathServers shows the stack's datapath servers, each as it
// reports itself, and which one leads; nothing without a stack.
func printDatapathServers(ctx context.Context, out io.Writer, s *sandbox.Sandbox) error {
	if _, err := s.Stack(); err != nil {
		return nil
	}
	servers, err := s.DatapathServers(ctx, 2*time.Second)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nDATAPATH SERVER\tADDRESS\tRAFT\tROLE\tAPPLIED")
	for _, srv := range servers {
		node, raft, applied := srv.Node, srv.RaftAddress, fmt.Sprint(srv.AppliedIndex)
		if node == "" {
			node, raft = "host", "in process"
		}
		if srv.Role == datapath.RoleUnreachable {
			applied = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", node, srv.Address, raft, srv.Role, applied)
	}
	return w.Flush()
}

func nodeCommand() *cli.Command {
	op := func(name, usage string, f func(s *sandbox.Sandbox, node string) error) *cli.Command {
		return &cli.Command{
			Name: name, Usage: usage, ArgsUsage: "NODE",
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return fmt.Errorf("node %s takes one node name, got %d arguments", name, c.NArg())
				}
				s, err := open(c)
				if err != nil {
					return err
				}
				if err := f(s, c.Args().First()); err != nil {
					return err
				}
				fmt.Printf("node %s: %s done\n", c.Args().First(), name)
				return nil
			},
		}
	}
	return &cli.Command{
		Name:  "node",
		Usage: "power a node (a rack, in a scale sandbox) off or on, cut or restore its network, kill or restart one of its processes",
		Subcommands: []*cli.Command{
			op("stop", "power cut: SIGKILL the node's kwok and every process of the node at once", (*sandbox.Sandbox).Stop),
			op("start", "boot the node again (new boot id)", (*sandbox.Sandbox).Start),
			partitionCommand(),
			op("heal", "remove every cut of the node", (*sandbox.Sandbox).Heal),
			killCommand(),
			restartCommand(),
		},
	}
}

// partitionCommand is `node partition NAME [--from apiserver|datapath|all]`.
func partitionCommand() *cli.Command {
	return &cli.Command{
		Name:      "partition",
		ArgsUsage: "NODE [--from apiserver|datapath|all|datapath-group]",
		Usage: "cut the node off (packets dropped silently); its processes keep running. " +
			"--from apiserver: a zombie that still reaches the datapath; datapath: storage-isolated, still Ready; all (default): both; " +
			"datapath-group: the node's datapath server cut off from the other servers of its group only (--datapath-servers)",
		Flags: []cli.Flag{&cli.StringFlag{Name: "from", Value: string(sandbox.PartitionAll),
			Usage: "what to cut the node off from: apiserver, datapath, all or datapath-group"}},
		Action: func(c *cli.Context) error {
			node, from, err := partitionArgs(c.Args().Slice(), c.String("from"))
			if err != nil {
				return err
			}
			target, err := sandbox.ParsePartitionTarget(from)
			if err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			s, err := open(c)
			if err != nil {
				return err
			}
			if err := s.Partition(node, target); err != nil {
				return err
			}
			fmt.Printf("node %s: cut off from %s\n", node, target)
			return nil
		},
	}
}

// partitionArgs takes the node name (the --from flag may come after it on the
// line: main moves flags in front of arguments).
func partitionArgs(args []string, from string) (node, target string, err error) {
	if len(args) != 1 {
		return "", "", fmt.Errorf("node partition takes one node name and an optional --from apiserver|datapath|all, got %q", args)
	}
	return args[0], from, nil
}

func kubeconfigCommand() *cli.Command {
	return &cli.Command{
		Name:  "kubeconfig",
		Usage: "print the path of the admin kubeconfig (export KUBECONFIG=$(vigil-sandbox kubeconfig))",
		Action: func(c *cli.Context) error {
			s, err := open(c)
			if err != nil {
				return err
			}
			fmt.Println(s.Kubeconfig())
			return nil
		},
	}
}

// startStack runs Vigil's volume stack on a new sandbox; on failure the sandbox
// stays up for `vigil-sandbox down` and the logs.
func startStack(c *cli.Context, s *sandbox.Sandbox) error {
	dir := c.String("vigil-bin-dir")
	if dir == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--vigil-bin-dir not given and this binary's path is unknown: %w", err)
		}
		dir = filepath.Dir(exe)
	}
	servers, err := datapathServers(c)
	if err != nil {
		return err
	}
	stk, err := s.StartStack(c.Context, sandbox.StackConfig{VigilBinDir: dir, Auth: sandbox.StackAuth(c.String("datapath-auth")),
		DatapathServers: servers})
	if err != nil {
		return fmt.Errorf("%w (the sandbox is up: logs in %s, `vigil-sandbox down` removes it)", err, s.WorkDir())
	}
	if err := sandbox.InstallCRDs(c.Context, s.RESTConfig()); err != nil {
		return fmt.Errorf("%w (the sandbox is up: `vigil-sandbox down` removes it)", err)
	}
	fmt.Printf("vigil stack: datapath %s (TLS, CA %s; %s identities; the manager's token %s), CSI controller %s, StorageClass %s\n",
		stk.DatapathAddr, stk.CAFile, stk.Auth, stk.TokenFile, stk.ControllerEndpoint, stk.StorageClass)
	fmt.Printf("run Vigil's manager on this stack (the CRDs of deploy/crds are installed):\n  %s\n", managerCommand(dir, s, stk))
	return nil
}

// managerCommand is the `vigil-manager run` line for a sandbox's stack: the
// admin kubeconfig and the datapath with its token and CA, so that it fences.
func managerCommand(binDir string, s *sandbox.Sandbox, stk *sandbox.Stack) string {
	return strings.Join([]string{filepath.Join(binDir, "vigil-manager"), "run",
		"--kubeconfig", s.Kubeconfig(), "--datapath", stk.DatapathAddr,
		"--datapath-token-file", stk.TokenFile, "--datapath-ca-file", stk.CAFile}, " ")
}

// checkInstallFlags refuses --install without real nodes, with --stack (two
// Vigils on one cluster) or with racks, and its own flags without it,
// before anything is created.
func checkInstallFlags(c *cli.Context) error {
	if !c.Bool("install") {
		for _, f := range []string{"install-dir", "install-timeout"} {
			if c.IsSet(f) {
				return fmt.Errorf("--%s is for --install: give --install too", f)
			}
		}
		return nil
	}
	switch {
	case c.String("kubelet") != sandbox.KubeletReal:
		return fmt.Errorf("%w: --install runs deploy/'s pods in containers, and kwok nodes run none: give --kubelet %s",
			sandbox.ErrInvalidConfig, sandbox.KubeletReal)
	case c.Bool("stack"):
		return fmt.Errorf("%w: --install and --stack both run Vigil: choose one (--install: deploy/ in containers; --stack: host processes on kwok nodes)",
			sandbox.ErrInvalidConfig)
	case c.Duration("install-timeout") <= 0:
		return fmt.Errorf("%w: --install-timeout %s: want a positive duration, e.g. 5m", sandbox.ErrInvalidConfig, c.Duration("install-timeout"))
	}
	if d := c.String("install-dir"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "kustomization.yaml")); err != nil {
			return fmt.Errorf("%w: --install-dir %s: want a kustomization directory (one holding kustomization.yaml): %v", sandbox.ErrInvalidConfig, d, err)
		}
	}
	return nil
}

// install applies deploy/ to the new sandbox (--install) and prints each
// component's time; on failure the sandbox stays up for its logs.
func install(c *cli.Context, s *sandbox.Sandbox, t0 time.Time) error {
	res, err := s.Install(c.Context, sandbox.InstallConfig{Dir: c.String("install-dir"), Timeout: c.Duration("install-timeout"),
		Progressf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }})
	if err != nil {
		return fmt.Errorf("%w\n(the sandbox is up: `vigil-sandbox status`, logs in %s, `vigil-sandbox down` removes it)", err, s.WorkDir())
	}
	fmt.Printf("vigil installed: %d objects, every component ready in %.1fs (%.1fs after up was called)\n",
		res.Objects, res.Took.Seconds(), time.Since(t0).Seconds())
	fmt.Printf("  export KUBECONFIG=%s; kubectl -n vigil-system get pods -o wide\n", s.Kubeconfig())
	return nil
}
