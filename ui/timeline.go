package ui

import (
	"fmt"
	"html"
	"html/template"
	"strings"
	"time"

	"github.com/vigil-storage/vigil/httpapi"
)

// Timeline geometry and colours (presentation attributes, so the SVG needs no
// stylesheet and no inline style, and looks the same served alone).
const (
	tlWidth    = 860
	tlMarginX  = 70
	tlStepY    = 58
	tlBarY     = 150
	tlBarH     = 18
	colorDone  = "#1a7f37"
	colorOpen  = "#8c959f"
	colorText  = "#1f2328"
	colorMuted = "#57606a"
)

// barColors colour the "where the time went" bar's segments, one per step after
// detection.
var barColors = []string{"#b42318", "#b35900", "#7d4e00", "#0b5cad", "#6639ba"}

// barLabels name the bar's segments: what the time before each step was spent on.
var barLabels = []string{"fencing", "reaping", "freeing", "starting replacements"}

// labelLines splits a long step label over two lines so neighbours never overlap.
func labelLines(label string) []string {
	if len(label) <= 12 {
		return []string{label}
	}
	if i := strings.Index(label, " "); i > 0 {
		return []string{label[:i], label[i+1:]}
	}
	return []string{label}
}

// TimelineSVG draws a recovery as a picture a person understands in seconds: the
// six steps as a line of dots (filled when done) with the time after detection
// under each, the time between two steps on the line joining them, and below a
// bar whose segments are proportional to where the time until the replacements
// ran went.
func TimelineSVG(v httpapi.RecoveryView) template.HTML {
	steps := v.Steps
	n := len(steps)
	if n == 0 {
		return ""
	}
	height := tlBarY + tlBarH + 34
	var b strings.Builder
	title := "Recovery of node " + v.Node + ": " + summary(v)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="%s">`,
		tlWidth, height, html.EscapeString(title))
	fmt.Fprintf(&b, `<title>%s</title>`, html.EscapeString(title))
	gap := float64(tlWidth-2*tlMarginX) / float64(n-1)
	x := func(i int) float64 { return tlMarginX + gap*float64(i) }
	// Lines between steps, with the time between them.
	for i := 1; i < n; i++ {
		done := steps[i].AfterSeconds != nil && steps[i-1].AfterSeconds != nil
		color := colorOpen
		dash := ` stroke-dasharray="5 5"`
		if done {
			color, dash = colorDone, ""
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="3"%s/>`, x(i-1)+9, tlStepY, x(i)-9, tlStepY, color, dash)
		if done {
			if d := seconds(*steps[i].AfterSeconds - *steps[i-1].AfterSeconds); d >= 0 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="12" fill="%s">%s</text>`,
					(x(i-1)+x(i))/2, tlStepY-10, colorMuted, html.EscapeString("+"+short(d)))
			}
		}
	}
	for i, s := range steps {
		fill, stroke := "#ffffff", colorOpen
		if s.At != nil {
			fill, stroke = colorDone, colorDone
		}
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="8" fill="%s" stroke="%s" stroke-width="3"/>`, x(i), tlStepY, fill, stroke)
		label := s.Label
		if s.Count >= 0 && s.At != nil {
			label += fmt.Sprintf(" (%d)", s.Count)
		}
		lines := labelLines(label)
		for j, line := range lines {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="13" font-weight="600" fill="%s">%s</text>`,
				x(i), tlStepY+28+16*j, colorText, html.EscapeString(line))
		}
		when := "pending"
		if s.AfterSeconds != nil {
			when = "at +" + short(seconds(*s.AfterSeconds))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="12" fill="%s">%s</text>`,
			x(i), tlStepY+30+16*len(lines), colorMuted, html.EscapeString(when))
	}
	drawBar(&b, steps)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text above is escaped
}

// drawBar draws the time from detection to the replacements Running, one segment
// per step that completed, proportional to its share.
func drawBar(b *strings.Builder, steps []httpapi.Step) {
	last := 4 // replacements Running
	if len(steps) <= last {
		return
	}
	end := 0.0
	for _, s := range steps[1 : last+1] {
		if s.AfterSeconds != nil && *s.AfterSeconds > end {
			end = *s.AfterSeconds
		}
	}
	width := float64(tlWidth - 2*tlMarginX)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" rx="3" fill="#eaeef2"/>`, tlMarginX, tlBarY, width, tlBarH)
	if end <= 0 {
		return
	}
	prev := 0.0
	for i, s := range steps[1 : last+1] {
		if s.AfterSeconds == nil || *s.AfterSeconds <= prev {
			continue
		}
		x0 := tlMarginX + width*prev/end
		w := width * (*s.AfterSeconds - prev) / end
		part := barLabels[i%len(barLabels)] + " " + short(seconds(*s.AfterSeconds-prev))
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`,
			x0, tlBarY, w, tlBarH, barColors[i%len(barColors)], html.EscapeString(part))
		if w >= float64(7*len(part)) {
			fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11.5" font-weight="600" fill="#ffffff">%s</text>`,
				x0+w/2, tlBarY+tlBarH-4, html.EscapeString(part))
		}
		prev = *s.AfterSeconds
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12" fill="%s">detected</text>`, tlMarginX, tlBarY+tlBarH+16, colorMuted)
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="end" font-size="12" fill="%s">%s</text>`,
		tlMarginX+width, tlBarY+tlBarH+16, colorMuted, html.EscapeString("replacements Running: "+short(seconds(end))))
}

// summary says in one phrase how the recovery went.
func summary(v httpapi.RecoveryView) string {
	switch {
	case v.TimeToRecover != "":
		return "recovered in " + v.TimeToRecover
	case v.Closed:
		return strings.ToLower(v.Phase)
	}
	return "in progress (" + v.Phase + ")"
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// short renders a duration for people: 0.4s, 2.3s, 1m1.5s.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(100 * time.Millisecond).String()
}
