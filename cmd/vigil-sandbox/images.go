package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/images"
)

func imagesCommand() *cli.Command {
	return &cli.Command{
		Name:  "images",
		Usage: "build Vigil's container images here, without Docker or any container engine",
		Description: "Each image is one docker-archive tarball, OUT/NAME.tar, that `ctr -n k8s.io images import` loads\n" +
			"into a containerd (and `docker load` into Docker). The images:\n" + imageList(),
		Subcommands: []*cli.Command{imagesBuildCommand()},
	}
}

func imageList() string {
	var b strings.Builder
	for _, n := range images.Names() {
		ref, _ := images.Ref(n, "TAG", sandbox.Pins())
		if strings.HasSuffix(ref, ":") {
			ref = "(make testbin does not build it yet)"
		}
		fmt.Fprintf(&b, "  %-26s %s\n", n, ref)
	}
	b.WriteString("and, built only when --only names them, those of make conformance (the upstream storage e2e suite):\n")
	for _, n := range images.ConformanceNames() {
		ref, _ := images.Ref(n, "TAG", sandbox.Pins())
		fmt.Fprintf(&b, "  %-26s %s\n", n, ref)
	}
	return b.String()
}

func imagesBuildCommand() *cli.Command {
	return &cli.Command{
		Name:  "build",
		Usage: "build the images into --out (make image runs this)",
		Description: "Builds every image (or those --only names) from files of this machine, with no registry, daemon or\n" +
			"base image: the vigil image from --bin-dir (make build) and Debian's e2fsprogs and util-linux, the\n" +
			"pause and writer images from their Go programs (compiled from --source with go), the tools image\n" +
			"from Debian's busybox-static, the CSI sidecars from --testbin-dir (make testbin). A sidecar that\n" +
			"make testbin does not build is skipped with a line that says so. The images:\n" + imageList(),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: filepath.Join("bin", "images"), Usage: "directory for the tarballs (created)"},
			&cli.StringSliceFlag{Name: "only", Usage: "build only these images (repeat, or separate with commas)"},
			&cli.StringFlag{Name: "tag", Value: "dev", Usage: "tag of the vigil, pause and writer images"},
			&cli.StringFlag{Name: "bin-dir", Usage: "binaries of make build for the vigil image (default: this binary's directory)"},
			&cli.StringFlag{Name: "testbin-dir", Usage: "binaries of make testbin for the sidecars (default: the pinned cache)"},
			&cli.StringFlag{Name: "source", Value: ".", Usage: "Vigil's source tree, to compile the pause and writer programs"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("images build takes no arguments, got %q (name images with --only)", c.Args().Slice())
			}
			binDir := c.String("bin-dir")
			if binDir == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--bin-dir not given and this binary's path is unknown: %w", err)
				}
				binDir = filepath.Dir(exe)
			}
			testbin := c.String("testbin-dir")
			if testbin == "" {
				testbin = sandbox.BinDir()
			}
			var only []string
			for _, o := range c.StringSlice("only") {
				only = append(only, strings.Split(o, ",")...)
			}
			t0 := time.Now()
			res, err := images.Build(c.Context, images.Options{Out: c.String("out"), Only: only, Tag: c.String("tag"),
				VigilBinDir: binDir, TestbinDir: testbin, Pins: sandbox.Pins(), SourceDir: c.String("source"),
				Go: os.Getenv("GO"), Progress: os.Stdout})
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "IMAGE\tREFERENCE\tSIZE\tFILE")
			for _, r := range res {
				if r.Skipped != "" {
					fmt.Fprintf(tw, "%s\t-\t-\tskipped: %s\n", r.Name, r.Skipped)
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%.1f MB\t%s\n", r.Name, r.Ref, float64(r.Size)/1e6, r.File)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Printf("images built in %.1fs\n", time.Since(t0).Seconds())
			return nil
		},
	}
}
