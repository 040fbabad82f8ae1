package manager

import (
	"context"
	"log/slog"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/vigil-storage/vigil"
)

// settingsGate is what run needs from settings besides the controllers'
// reader: whether a refused value blocks acting, and when that may change.
// *settings.Settings implements it.
type settingsGate interface {
	ActBlocked() error
	ProblemsChanged() <-chan struct{}
}

// maxEventMessage bounds an Event's message (the API server's limit for the
// events.k8s.io note is 1 KiB).
const maxEventMessage = 1000

// leaseRef is the object the manager's own Events are about: its
// leader-election Lease, which exists in every deployment (it need not exist yet
// for an Event to name it).
func leaseRef(o runOptions) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
		Namespace: o.leaseNamespace, Name: o.leaseName}
}

// reportActBlocked logs and records an Event on ref every time whether settings
// block acting, or why, changes; until ctx ends.
func reportActBlocked(ctx context.Context, gate settingsGate, rec record.EventRecorder, ref *corev1.ObjectReference) {
	last := ""
	for {
		changed := gate.ProblemsChanged()
		msg := ""
		if err := gate.ActBlocked(); err != nil {
			msg = err.Error()
		}
		switch {
		case msg == last:
		case msg != "":
			slog.Error("vigil-manager: settings block acting; /readyz fails until they are fixed", "reason", msg)
			rec.Event(ref, corev1.EventTypeWarning, vigil.EventReasonSettingsBlocked, shorten(msg, maxEventMessage))
		default:
			slog.Info("vigil-manager: settings no longer block acting")
			rec.Event(ref, corev1.EventTypeNormal, vigil.EventReasonSettingsUnblocked,
				"every refused settings value that blocked acting was fixed or removed")
		}
		last = msg
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// shorten cuts s to at most n bytes, at a character boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
