package manager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/informers"

	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/httpapi"
	"github.com/vigil-storage/vigil/settings"
	"github.com/vigil-storage/vigil/ui"
)

// Flags of `vigil-manager run` for the REST API and the UI.
const (
	flagAPITokenFile   = "api-token-file"
	flagStateDir       = "state-dir"
	flagTLSCert        = "tls-cert-file"
	flagTLSKey         = "tls-private-key-file"
	flagInsecureListen = "insecure-listen"
)

// tokenFileName is the generated token's file in --state-dir.
const tokenFileName = "api-token"

func apiFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagAPITokenFile, TakesFile: true,
			Usage: "file holding the bearer token the REST API and UI need for writes (and for reads beyond loopback); default: generated into --state-dir on first start"},
		&cli.StringFlag{Name: flagStateDir, TakesFile: true, Value: defaultStateDir(),
			Usage: "directory for the manager's own state: the generated API token (" + tokenFileName + ")"},
		&cli.StringFlag{Name: flagTLSCert, TakesFile: true, Usage: "serve HTTPS with this certificate (PEM); needs --" + flagTLSKey},
		&cli.StringFlag{Name: flagTLSKey, TakesFile: true, Usage: "private key (PEM) of --" + flagTLSCert},
		&cli.BoolFlag{Name: flagInsecureListen,
			Usage: "allow plain HTTP on a non-loopback --listen address (the token then crosses the network in clear; a warning is logged)"},
	}
}

// defaultStateDir is $XDG_STATE_HOME/vigil, else ~/.local/state/vigil, else
// ./vigil-state.
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "vigil")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "vigil")
	}
	return "vigil-state"
}

// apiOptions are the validated API flags.
type apiOptions struct {
	tokenFile, stateDir string
	certFile, keyFile   string
	insecure            bool
	// loopback: --listen binds loopback only, so reads are open.
	loopback bool
}

func parseAPIOptions(c *cli.Context, listen string) (apiOptions, error) {
	o := apiOptions{
		tokenFile: c.String(flagAPITokenFile), stateDir: c.String(flagStateDir),
		certFile: c.String(flagTLSCert), keyFile: c.String(flagTLSKey),
		insecure: c.Bool(flagInsecureListen), loopback: httpapi.IsLoopback(listen),
	}
	switch {
	case (o.certFile == "") != (o.keyFile == ""):
		return o, fmt.Errorf("--%s and --%s go together (got %q and %q)", flagTLSCert, flagTLSKey, o.certFile, o.keyFile)
	case !o.loopback && o.certFile == "" && !o.insecure:
		return o, fmt.Errorf("--%s %s is not a loopback address: serve TLS (--%s and --%s) or accept plain HTTP with --%s",
			flagListen, listen, flagTLSCert, flagTLSKey, flagInsecureListen)
	case o.tokenFile == "" && o.stateDir == "":
		return o, fmt.Errorf("--%s is empty and no --%s given: one is needed for the API token", flagStateDir, flagAPITokenFile)
	}
	return o, nil
}

func (o apiOptions) tls() bool { return o.certFile != "" }

// loadToken reads --api-token-file, or the token generated in --state-dir
// (creating it on first start). A generated token's path is logged.
func (o apiOptions) loadToken(log *slog.Logger) (string, error) {
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--%s: %w", flagAPITokenFile, err)
		}
		tok := strings.TrimSpace(string(b))
		if err := checkToken(tok); err != nil {
			return "", fmt.Errorf("--%s %s: %w", flagAPITokenFile, o.tokenFile, err)
		}
		return tok, nil
	}
	path := filepath.Join(o.stateDir, tokenFileName)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		tok := strings.TrimSpace(string(b))
		if err := checkToken(tok); err != nil {
			return "", fmt.Errorf("generated API token %s: %w (delete it to generate a new one)", path, err)
		}
		log.Info("vigil-manager: API token for writes", "file", path)
		return tok, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("--%s: %w", flagStateDir, err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(raw)
	if err := os.MkdirAll(o.stateDir, 0o700); err != nil {
		return "", fmt.Errorf("--%s: %w", flagStateDir, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("--%s: write the generated API token: %w", flagStateDir, err)
	}
	_, werr := io.WriteString(f, tok+"\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("--%s: write the generated API token: %w", flagStateDir, err)
	}
	log.Info("vigil-manager: generated the API token for writes", "file", path)
	return tok, nil
}

// minTokenLen refuses tokens short enough to guess.
const minTokenLen = 16

func checkToken(tok string) error {
	switch {
	case tok == "":
		return errors.New("the token is empty")
	case len(tok) < minTokenLen:
		return fmt.Errorf("the token has %d characters; at least %d are needed", len(tok), minTokenLen)
	case strings.ContainsAny(tok, " \t\r\n"):
		return errors.New("the token must be one line without spaces")
	}
	return nil
}

// apiServer is the REST API and the UI, mounted on the manager's mux.
type apiServer struct {
	api   *httpapi.API
	nodes *loopNodes
}

// mountAPI builds the REST API and the UI on mux: settings from set (the API
// writes through it, recording who), nodes from the controllers' verdicts, the
// datapath and the Node informer of factory, recoveries from an informer over
// NodeRecovery objects. Call it before the factory starts; run the returned
// server's run in a goroutine.
func mountAPI(mux *http.ServeMux, o apiOptions, token string, set *settings.Settings, src nodeSources,
	factory informers.SharedInformerFactory, recoveries *v1alpha1.Client, log *slog.Logger) (*apiServer, *recoveryInformer, error) {
	nodes := newLoopNodes(factory, src)
	rec := newRecoveryInformer(recoveries)
	api, err := httpapi.New(httpapi.Config{
		Settings: set, Nodes: nodes, Recoveries: rec, Token: token,
		TokenForReads: !o.loopback, Log: log,
	})
	if err != nil {
		return nil, nil, err
	}
	if err := nodes.onChange(api.NodesChanged); err != nil {
		return nil, nil, err
	}
	if err := rec.onChange(api.RecoveriesChanged); err != nil {
		return nil, nil, err
	}
	pages, err := ui.New(ui.Config{API: api, Log: log})
	if err != nil {
		return nil, nil, err
	}
	api.Register(mux)
	pages.Register(mux)
	return &apiServer{api: api, nodes: nodes}, rec, nil
}

// serve serves lis with TLS when configured; a plain non-loopback listener is
// warned about.
func (o apiOptions) serve(srv *http.Server, lis net.Listener, log *slog.Logger) error {
	if o.tls() {
		return srv.ServeTLS(lis, o.certFile, o.keyFile)
	}
	if !o.loopback {
		log.Warn("vigil-manager: serving plain HTTP beyond loopback (--insecure-listen): the API token crosses the network in clear", "address", lis.Addr().String())
	}
	return srv.Serve(lis)
}

func (o apiOptions) scheme() string {
	if o.tls() {
		return "https"
	}
	return "http"
}

// handler wraps the mux: security headers always; on loopback, only loopback
// Host names (reads are open there, so no rebound DNS name may reach them).
func (o apiOptions) handler(mux http.Handler) http.Handler {
	h := httpapi.Secure(mux)
	if o.loopback {
		h = httpapi.LoopbackHostOnly(h)
	}
	return h
}

// run feeds the event stream, and polls what the nodes view shows, until ctx
// ends.
func (s *apiServer) run(ctx context.Context) {
	go s.nodes.run(ctx, s.api.NodesChanged)
	s.api.Run(ctx)
}
