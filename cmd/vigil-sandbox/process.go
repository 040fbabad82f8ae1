package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/sandbox"
)

// processHelp lists the processes a node runs, with what each does, for the
// help of `node kill` and `node restart`.
func processHelp() string {
	var b strings.Builder
	b.WriteString("NAME is one of the node's processes (`vigil-sandbox status` lists what runs on each node):\n")
	for _, p := range sandbox.NodeProcesses {
		fmt.Fprintf(&b, "\n   %-10s %s", p.Name, p.Usage)
	}
	b.WriteString("\n\nor one a test registered on the node.")
	return b.String()
}

func processNames() string {
	names := make([]string, len(sandbox.NodeProcesses))
	for i, p := range sandbox.NodeProcesses {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// processArgs checks the line of `node kill|restart NODE --process NAME`
// before anything is touched.
func processArgs(c *cli.Context) (node, process string, err error) {
	if c.NArg() != 1 {
		return "", "", fmt.Errorf("node %s takes one node name and --process NAME, got %d arguments %q", c.Command.Name, c.NArg(), c.Args().Slice())
	}
	process = c.String("process")
	if process == "" {
		return "", "", fmt.Errorf("%w: node %s needs --process NAME: one of %s, or a process a test registered (see `vigil-sandbox status`)",
			sandbox.ErrUnknownProcess, c.Command.Name, processNames())
	}
	return c.Args().First(), process, nil
}

func processFlag() cli.Flag {
	return &cli.StringFlag{Name: "process", Usage: "the process: " + processNames() + ", or one a test registered"}
}

// killCommand is `node kill NODE --process NAME`.
func killCommand() *cli.Command {
	return &cli.Command{
		Name:        "kill",
		ArgsUsage:   "NODE --process NAME",
		Usage:       "SIGKILL one process of the node (a crash); the node's other processes keep running and nothing starts it again until `node restart` or the node's next boot",
		Description: processHelp(),
		Flags:       []cli.Flag{processFlag()},
		Action: func(c *cli.Context) error {
			node, process, err := processArgs(c)
			if err != nil {
				return err
			}
			s, err := open(c)
			if err != nil {
				return err
			}
			if err := s.KillProcess(node, process); err != nil {
				return err
			}
			fmt.Printf("node %s: %s killed\n", node, process)
			return nil
		},
	}
}

// restartCommand is `node restart NODE --process NAME [--timeout D]`.
func restartCommand() *cli.Command {
	return &cli.Command{
		Name:      "restart",
		ArgsUsage: "NODE --process NAME [--timeout 30s]",
		Usage: "restart one process of the node as a DaemonSet's rolling update does: SIGTERM, up to --timeout for it to exit, " +
			"SIGKILL if it has not, then the same command line again (a process that is not running is only started)",
		Description: processHelp(),
		Flags: []cli.Flag{processFlag(),
			&cli.DurationFlag{Name: "timeout", Value: sandbox.DefaultStopTimeout, Usage: "how long the process may take to exit after SIGTERM before it is SIGKILLed"}},
		Action: func(c *cli.Context) error {
			node, process, err := processArgs(c)
			if err != nil {
				return err
			}
			if d := c.Duration("timeout"); d <= 0 {
				return fmt.Errorf("%w: --timeout %s: want a duration above 0 (default %s)", sandbox.ErrInvalidConfig, d, sandbox.DefaultStopTimeout)
			}
			s, err := open(c)
			if err != nil {
				return err
			}
			r, err := s.RestartProcess(node, process, c.Duration("timeout"))
			if err != nil {
				return err
			}
			switch {
			case r.OldPID == 0:
				fmt.Printf("node %s: %s was not running; started as pid %d\n", node, process, r.NewPID)
			case r.Killed:
				fmt.Printf("node %s: %s (pid %d) did not exit within %s of SIGTERM: SIGKILLed; started again as pid %d\n",
					node, process, r.OldPID, c.Duration("timeout"), r.NewPID)
			default:
				fmt.Printf("node %s: %s (pid %d) exited %s after SIGTERM; started again as pid %d\n",
					node, process, r.OldPID, r.Stopped.Round(time.Millisecond), r.NewPID)
			}
			return nil
		},
	}
}
