package enginenode

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/engine-node/fdkeeper"
)

// DefaultKeeperSocket is where the engine and the fd keeper meet by default.
// It lies in a directory of its own under the engine's state directory, which
// deploy/ shares with the keeper's pod as a hostPath.
var DefaultKeeperSocket = filepath.Join(DefaultStateDir, "fd-keeper", "keeper.sock")

func keeperCommand() *cli.Command {
	return &cli.Command{
		Name:  "fd-keeper",
		Usage: "hold the volumes' FUSE connections so that an engine restart does not break them",
		Description: "A FUSE connection lives as long as any process holds its /dev/fuse descriptor. The fd keeper\n" +
			"holds one per staged volume, put there by the engine after it mounts the volume's disk, and hands\n" +
			"it to the next engine after a restart (SIGTERM or SIGKILL), which serves the same connection on:\n" +
			"running pods see their I/O stall for the moment of the restart, not fail. It listens on --socket\n" +
			"(a unix SOCK_SEQPACKET socket, mode 0600; the engine's --fd-keeper-socket), keeps nothing on disk,\n" +
			"and runs until SIGTERM or SIGINT. Stopping it lets go of every connection: a volume whose engine\n" +
			"is not serving it then fails its I/O. Upgrade it only on a drained node (docs/operations.md).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Value: DefaultKeeperSocket, EnvVars: []string{"VIGIL_FD_KEEPER_SOCKET"}, TakesFile: true,
				Usage: "unix socket to serve on; a socket left by a keeper that is gone is replaced, one a live keeper serves is refused"},
		},
		Action: runKeeper,
	}
}

func runKeeper(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return fmt.Errorf("fd-keeper takes no arguments, got %q", c.Args().Slice())
	}
	path := c.String("socket")
	if path == "" {
		return fmt.Errorf("--socket is empty: want the path of the unix socket the engine's --fd-keeper-socket names")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("--socket %s: %w", path, err)
	}
	l, err := fdkeeper.Listen(path)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	k := fdkeeper.New(log)
	log.Info("fd keeper serving", "socket", path)
	err = k.Serve(ctx, l)
	if n := k.Close(); n > 0 {
		log.Warn("fd keeper stopping while holding connections: they end now unless an engine serves them", "held", n)
	}
	return err
}
