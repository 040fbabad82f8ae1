package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/internal/junitsummary"
)

// junitSummaryCommand counts e2e.test's JUnit report for make conformance.
func junitSummaryCommand() *cli.Command {
	return &cli.Command{
		Name:      "junit-summary",
		Usage:     "count the passed, failed and skipped tests of e2e.test's JUnit report per storage test suite (make conformance)",
		ArgsUsage: "JUNIT.xml",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "fail", Usage: "exit 1 when a test failed or none passed"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("junit-summary takes one argument, the JUnit report; got %q", c.Args().Slice())
			}
			f, err := os.Open(c.Args().First())
			if err != nil {
				return err
			}
			defer f.Close()
			s, err := junitsummary.Read(f)
			if err != nil {
				return fmt.Errorf("%s: %w", c.Args().First(), err)
			}
			s.Write(os.Stdout)
			if c.Bool("fail") && (s.Total.Failed > 0 || s.Total.Passed == 0) {
				return cli.Exit(fmt.Sprintf("conformance: %d failed, %d passed", s.Total.Failed, s.Total.Passed), 1)
			}
			return nil
		},
	}
}
