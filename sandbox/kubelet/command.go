package kubelet

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Command is the `kubelet` subcommand for bin/vigil-sandbox: it runs the
// stand-in for one node until SIGTERM or SIGINT. Its flags default to the
// environment the sandbox gives a node's processes (VIGIL_NODE,
// VIGIL_KUBECONFIG, VIGIL_NODE_DIR), so a ProcessSpec needs only the endpoint:
//
//	vigil-sandbox kubelet --csi-endpoint unix://$VIGIL_NODE_DIR/engine/csi.sock
func Command() *cli.Command {
	return &cli.Command{
		Name:  "kubelet",
		Usage: "the volume half of a kubelet for one sandbox node (stage/publish through the node's CSI service, volumesInUse)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "node", EnvVars: []string{"VIGIL_NODE"}, Usage: "node name"},
			&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"VIGIL_KUBECONFIG"}, Usage: "kubeconfig reaching the API server"},
			&cli.StringFlag{Name: "csi-endpoint", Usage: "the node's CSI node service, unix:///path/csi.sock"},
			&cli.StringFlag{Name: "root-dir", Usage: "kubelet directory (default $VIGIL_NODE_DIR/kubelet)"},
			&cli.StringFlag{Name: "driver", Usage: "CSI driver whose volumes are mounted (default driver.vigil.io)"},
			&cli.DurationFlag{Name: "poll-interval", Value: DefaultPollInterval, Usage: "longest time between two syncs"},
			&cli.BoolFlag{Name: "debug", Usage: "log at debug level"},
		},
		Action: runCommand,
	}
}

func runCommand(c *cli.Context) error {
	root := c.String("root-dir")
	if root == "" {
		if dir := os.Getenv("VIGIL_NODE_DIR"); dir != "" {
			root = filepath.Join(dir, "kubelet")
		}
	}
	if c.String("node") == "" || c.String("kubeconfig") == "" || c.String("csi-endpoint") == "" || root == "" {
		return fmt.Errorf("%w: --node (or VIGIL_NODE), --kubeconfig (or VIGIL_KUBECONFIG), --csi-endpoint and --root-dir (or VIGIL_NODE_DIR) are required; got %q, %q, %q, %q",
			ErrBadConfig, c.String("node"), c.String("kubeconfig"), c.String("csi-endpoint"), root)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.String("kubeconfig"))
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", c.String("kubeconfig"), err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", c.String("kubeconfig"), err)
	}
	level := slog.LevelInfo
	if c.Bool("debug") {
		level = slog.LevelDebug
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, Config{
		NodeName: c.String("node"), Client: client, CSIEndpoint: c.String("csi-endpoint"), RootDir: root,
		Driver: c.String("driver"), PollInterval: c.Duration("poll-interval"),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
}
