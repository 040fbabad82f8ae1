package manager

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/vigil-storage/vigil/settings"
)

const flagOutput = "output"

func outputFlag(formats string) cli.Flag {
	return &cli.StringFlag{Name: flagOutput, Aliases: []string{"o"}, Value: "table", Usage: "output format: " + formats}
}

// outputFormat returns the -o value, refusing anything but table, json, yaml (and
// value when allowValue).
func outputFormat(c *cli.Context, allowValue bool) (string, error) {
	allowed := []string{"table", "json", "yaml"}
	if allowValue {
		allowed = append(allowed, "value")
	}
	f := c.String(flagOutput)
	if !slices.Contains(allowed, f) {
		return "", fmt.Errorf("invalid output format %q for -o; allowed: %s", f, strings.Join(allowed, ", "))
	}
	return f, nil
}

// entryView is a setting as the json and yaml outputs show it.
type entryView struct {
	Name        string          `json:"name"`
	Value       string          `json:"value"`
	Default     string          `json:"default"`
	Source      settings.Source `json:"source"`
	ManagedPath string          `json:"managedPath,omitempty"`
	Problem     string          `json:"problem,omitempty"`
	Blocking    bool            `json:"blocking,omitempty"`
	Type        settings.Type   `json:"type"`
	Allowed     string          `json:"allowed"`
	Category    string          `json:"category"`
}

func viewOf(e settings.Entry) entryView {
	return entryView{
		Name: e.Name, Value: e.Value, Default: e.Default, Source: e.Source,
		ManagedPath: e.ManagedPath, Problem: e.Problem, Blocking: e.Blocking,
		Type: e.Definition.Type, Allowed: e.Definition.Allowed(), Category: e.Definition.Category,
	}
}

// writeEntries prints entries; the table also prints the problems that belong
// to no entry (overlay files that name no setting).
func writeEntries(w io.Writer, format string, entries []settings.Entry, problems ...settings.Problem) error {
	views := make([]entryView, len(entries))
	for i, e := range entries {
		views[i] = viewOf(e)
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(views)
	case "yaml":
		out, err := yaml.Marshal(views)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	var orphans []string
	for _, p := range problems {
		if p.Setting == "" {
			orphans = append(orphans, "! "+p.Message+blocksActing(p.Blocking))
		}
	}
	return writeTable(w, views, orphans)
}

func blocksActing(b bool) string {
	if b {
		return " (blocks acting: vigil-manager run does not act until this is fixed)"
	}
	return ""
}

func writeTable(w io.Writer, views []entryView, problems []string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVALUE\tDEFAULT\tSOURCE")
	for _, v := range views {
		src := string(v.Source)
		if v.ManagedPath != "" {
			src += " (locked by " + v.ManagedPath + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, orEmpty(v.Value), orEmpty(v.Default), src)
		if v.Problem != "" {
			problems = append(problems, fmt.Sprintf("! %s: %s%s", v.Name, v.Problem, blocksActing(v.Blocking)))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range problems {
		if _, err := fmt.Fprintln(w, p); err != nil {
			return err
		}
	}
	return nil
}

func orEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}
