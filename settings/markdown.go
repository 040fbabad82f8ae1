package settings

import (
	"fmt"
	"strings"
)

// MarkdownTable renders every definition as markdown: one table per category
// with type, default, allowed values or range and the description of each choice.
// The README's settings section is this text (a test keeps it in step).
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("Set with `vigil-manager settings set NAME VALUE`; see [Configuration](#configuration) for where values are kept.\n")
	category := ""
	for i := range definitions {
		d := &definitions[i]
		if d.Category != category {
			category = d.Category
			fmt.Fprintf(&b, "\n### %s\n\n", category)
			b.WriteString("| Setting | Type | Default | Allowed | Description |\n")
			b.WriteString("| --- | --- | --- | --- | --- |\n")
		}
		fmt.Fprintf(&b, "| `%s`<br>%s | %s | %s | %s | %s |\n",
			d.Name, cell(d.DisplayName), d.Type, code(d.Default), cell(d.allowedMarkdown()), cell(d.Description))
	}
	return b.String()
}

func (d *Definition) allowedMarkdown() string {
	switch d.Type {
	case TypeEnum, TypeBool:
		lines := make([]string, len(d.Choices))
		for i, c := range d.Choices {
			lines[i] = "`" + c.Value + "`: " + c.Description
		}
		return strings.Join(lines, "<br>")
	case TypeInt:
		return fmt.Sprintf("%d to %d", d.MinInt, d.MaxInt)
	case TypeDuration:
		return fmt.Sprintf("%s to %s (e.g. `500ms`, `15s`, `2m`)", FormatDuration(d.MinDuration), FormatDuration(d.MaxDuration))
	case TypeStringList:
		return "comma-separated " + d.ItemDescription
	}
	return ""
}

func code(s string) string {
	if s == "" {
		return "(empty)"
	}
	return "`" + s + "`"
}

// cell makes text safe inside a markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", "<br>")
}
