package manager

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/tokenreview"
)

// Flags of `vigil-datapath serve` that say who may call it and how
// (identities, TLS).
const (
	flagServeTokenFile      = "token-file"
	flagServeControllerSAs  = "controller-service-accounts"
	flagServeEngineSA       = "engine-service-account"
	flagServeAudience       = "token-review-audience"
	flagServeCacheTTL       = "token-review-cache-ttl"
	flagServeOutageGrace    = "token-review-outage-grace"
	flagServeKubeconfig     = "kubeconfig"
	flagServeReviewQPS      = "token-review-qps"
	flagServeReviewBurst    = "token-review-burst"
	flagServeTLSCert        = "tls-cert-file"
	flagServeTLSKey         = "tls-private-key-file"
	flagServeInsecure       = "insecure"
	flagServeListen         = "listen"
	tokenReviewFlagsSection = "TokenReview: "
)

func datapathServeAuthFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagServeTokenFile, EnvVars: []string{"VIGIL_DATAPATH_TOKEN_FILE"}, TakesFile: true,
			Usage: "static tokens, for the sandbox and single-machine use: lines \"controller TOKEN\" (the manager, the CSI controller) and " +
				"\"node NODE TOKEN\" (that node's engine), one token per role and per node, # comments"},
		&cli.StringSliceFlag{Name: flagServeControllerSAs, EnvVars: []string{"VIGIL_DATAPATH_CONTROLLER_SERVICE_ACCOUNTS"},
			Usage: tokenReviewFlagsSection + "ServiceAccounts (NAMESPACE:NAME or NAMESPACE/NAME, comma-separated or repeated) whose tokens get the controller role, e.g. " +
				vigil.Namespace + ":" + vigil.ManagerServiceAccount + "," + vigil.Namespace + ":" + vigil.CSIControllerServiceAccount},
		&cli.StringSliceFlag{Name: flagServeEngineSA, EnvVars: []string{"VIGIL_DATAPATH_ENGINE_SERVICE_ACCOUNT"},
			Usage: tokenReviewFlagsSection + "ServiceAccount(s) of the engines, e.g. " + vigil.Namespace + ":" + vigil.EngineServiceAccount +
				"; each engine acts as the node its token is bound to (user extra " + vigil.NodeNameTokenExtra + "), never as one a request names"},
		&cli.StringFlag{Name: flagServeAudience, Value: vigil.DatapathTokenAudience,
			Usage: tokenReviewFlagsSection + "the audience callers' tokens must be issued for"},
		&cli.DurationFlag{Name: flagServeCacheTTL, Value: tokenreview.DefaultTTL,
			Usage: tokenReviewFlagsSection + "how long an answer is reused (refusals at most " + tokenreview.RefusalTTL.String() + ", never past the token's expiry); 1s to " + tokenreview.MaxTTL.String()},
		&cli.DurationFlag{Name: flagServeOutageGrace, Value: tokenreview.DefaultOutageGrace,
			Usage: tokenReviewFlagsSection + "while TokenReviews fail (the API server restarts), a token the API server accepted within this long and not expired is still accepted, " +
				"to a new connection; 0 refuses every new connection the API server cannot confirm; at most " + tokenreview.MaxOutageGrace.String() +
				". A connection that proved its token keeps that identity through an outage of any length, up to " + datapath.MaxBoundIdentity.String() +
				" after its last proof and never past the token's expiry, so running nodes' I/O and heartbeats never depend on the API server"},
		&cli.StringFlag{Name: flagServeKubeconfig, EnvVars: []string{"KUBECONFIG"}, TakesFile: true,
			Usage: tokenReviewFlagsSection + "kubeconfig for the TokenReviews (needs create tokenreviews); empty: the in-cluster config"},
		&cli.Float64Flag{Name: flagServeReviewQPS, Value: 50,
			Usage: tokenReviewFlagsSection + "client-side rate limit of the TokenReviews, per second: every token in use is reviewed again two thirds into the cache TTL, " +
				"so N nodes need N / (2/3 TTL) reviews a second (500 nodes at the default TTL: 25/s). At client-go's default of 5/s a 500-node cluster's " +
				"heartbeats waited 10 s for their reviews and the nodes looked silent"},
		&cli.IntFlag{Name: flagServeReviewBurst, Value: 100, Usage: tokenReviewFlagsSection + "TokenReviews sent at once before the rate limit applies"},
		&cli.StringFlag{Name: flagServeTLSCert, EnvVars: []string{"VIGIL_DATAPATH_TLS_CERT_FILE"}, TakesFile: true,
			Usage: "TLS certificate (PEM, chain after the leaf) for the datapath port, gRPC and the bulk channel alike; a replaced file is picked up"},
		&cli.StringFlag{Name: flagServeTLSKey, EnvVars: []string{"VIGIL_DATAPATH_TLS_PRIVATE_KEY_FILE"}, TakesFile: true,
			Usage: "private key (PEM) of --" + flagServeTLSCert},
		&cli.BoolFlag{Name: flagServeInsecure,
			Usage: "serve plaintext on an address off loopback (tokens and data cross the network in the clear); without TLS files only loopback addresses are served"},
	}
}

// serveSecurity is what the serve flags decided: who may call, and TLS.
type serveSecurity struct {
	auth datapath.Authenticator
	tls  *tls.Config // nil: plaintext
	// describe is one line for the log: identities and transport.
	describe string
}

// parseServeSecurity checks the identity and TLS flags and builds the
// authenticator and the TLS configuration; every error names the flag.
func parseServeSecurity(c *cli.Context) (serveSecurity, error) {
	var out serveSecurity
	tlsCfg, transport, err := serveTLS(c)
	if err != nil {
		return out, err
	}
	var auths datapath.Authenticators
	var who []string
	if f := c.String(flagServeTokenFile); f != "" {
		st, err := datapath.ReadTokensFile(f)
		if err != nil {
			return out, fmt.Errorf("--%s: %w", flagServeTokenFile, err)
		}
		ctrls, nodes := st.Counts()
		auths = append(auths, st)
		who = append(who, fmt.Sprintf("tokens file %s (%d controller, %d node tokens)", f, ctrls, nodes))
	}
	tr, desc, err := tokenReviewAuth(c)
	if err != nil {
		return out, err
	}
	if tr != nil {
		auths = append(auths, tr)
		who = append(who, desc)
	}
	if len(auths) == 0 {
		return out, fmt.Errorf("no credentials are accepted: give --%s (static tokens) or --%s and --%s (ServiceAccount tokens checked with TokenReview), or both",
			flagServeTokenFile, flagServeControllerSAs, flagServeEngineSA)
	}
	out.auth, out.tls = auths, tlsCfg
	if len(auths) == 1 {
		out.auth = auths[0]
	}
	out.describe = fmt.Sprintf("%s; identities: %v", transport, who)
	return out, nil
}

// serveTLS checks the TLS flags against the listen address: TLS with both
// files, plaintext on loopback, or plaintext anywhere with --insecure (logged).
func serveTLS(c *cli.Context) (*tls.Config, string, error) {
	cert, key, insecure := c.String(flagServeTLSCert), c.String(flagServeTLSKey), c.Bool(flagServeInsecure)
	listen := c.String(flagServeListen)
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, "", fmt.Errorf("--%s %q: want host:port: %v", flagServeListen, listen, err)
	}
	switch {
	case (cert == "") != (key == ""):
		return nil, "", fmt.Errorf("--%s and --%s go together: give both files for TLS, or neither", flagServeTLSCert, flagServeTLSKey)
	case cert != "" && insecure:
		return nil, "", fmt.Errorf("--%s contradicts --%s: give the TLS files or --%s, not both", flagServeInsecure, flagServeTLSCert, flagServeInsecure)
	case cert != "":
		cfg, err := datapath.ServerTLS(cert, key)
		if err != nil {
			return nil, "", fmt.Errorf("--%s, --%s: %w", flagServeTLSCert, flagServeTLSKey, err)
		}
		return cfg, "TLS with " + cert, nil
	case insecure:
		slog.Warn("datapath: serving plaintext (--"+flagServeInsecure+"): tokens and data cross the network in the clear", "listen", listen)
		return nil, "plaintext (--" + flagServeInsecure + ")", nil
	case !datapath.IsLoopback(host):
		return nil, "", fmt.Errorf("--%s %s is not a loopback address: give --%s and --%s to serve TLS, or --%s to serve plaintext there",
			flagServeListen, listen, flagServeTLSCert, flagServeTLSKey, flagServeInsecure)
	}
	return nil, "plaintext on loopback", nil
}

// tokenReviewAuth builds the TokenReview authenticator when ServiceAccounts
// are named; its other flags without them are an error (they would do nothing).
func tokenReviewAuth(c *cli.Context) (datapath.Authenticator, string, error) {
	ctrls, err := tokenreview.ParseServiceAccounts(c.StringSlice(flagServeControllerSAs))
	if err != nil {
		return nil, "", fmt.Errorf("--%s: %w", flagServeControllerSAs, err)
	}
	engines, err := tokenreview.ParseServiceAccounts(c.StringSlice(flagServeEngineSA))
	if err != nil {
		return nil, "", fmt.Errorf("--%s: %w", flagServeEngineSA, err)
	}
	if len(ctrls)+len(engines) == 0 {
		for _, f := range []string{flagServeAudience, flagServeCacheTTL, flagServeOutageGrace, flagServeKubeconfig, flagServeReviewQPS, flagServeReviewBurst} {
			if c.IsSet(f) && (f != flagServeKubeconfig || c.String(f) != "") {
				return nil, "", fmt.Errorf("--%s is a TokenReview setting, but no ServiceAccount has a role: give --%s or --%s",
					f, flagServeControllerSAs, flagServeEngineSA)
			}
		}
		return nil, "", nil
	}
	ttl, grace := c.Duration(flagServeCacheTTL), c.Duration(flagServeOutageGrace)
	if ttl < time.Second || ttl > tokenreview.MaxTTL {
		return nil, "", fmt.Errorf("--%s %s: want 1s to %s", flagServeCacheTTL, ttl, tokenreview.MaxTTL)
	}
	if grace < 0 || grace > tokenreview.MaxOutageGrace {
		return nil, "", fmt.Errorf("--%s %s: want 0 (refuse whatever the API server cannot confirm) to %s", flagServeOutageGrace, grace, tokenreview.MaxOutageGrace)
	}
	qps, burst := c.Float64(flagServeReviewQPS), c.Int(flagServeReviewBurst)
	if err := checkRate(flagServeReviewQPS, qps, flagServeReviewBurst, burst); err != nil {
		return nil, "", err
	}
	aud := c.String(flagServeAudience)
	if aud == "" {
		return nil, "", fmt.Errorf("--%s is empty: give the audience engines' projected tokens are issued for (%s)", flagServeAudience, vigil.DatapathTokenAudience)
	}
	cfg, err := tokenReviewConfig(c.String(flagServeKubeconfig))
	if err != nil {
		return nil, "", err
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("--%s: %w", flagServeKubeconfig, err)
	}
	a, err := tokenreview.New(tokenreview.Config{Reviewer: cs.AuthenticationV1().TokenReviews(), Audience: aud,
		Controllers: ctrls, Engines: engines, TTL: ttl, OutageGrace: grace})
	if err != nil {
		return nil, "", fmt.Errorf("--%s, --%s: %w", flagServeControllerSAs, flagServeEngineSA, err)
	}
	return a, fmt.Sprintf("TokenReview at %s (audience %s; controllers %v, engines %v)", cfg.Host, aud, ctrls, engines), nil
}

// tokenReviewConfig loads kubeconfig, or the in-cluster config when it is
// empty.
func tokenReviewConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--%s %s: %w", flagServeKubeconfig, kubeconfig, err)
		}
		cfg.UserAgent = "vigil-manager-datapath/" + vigil.Version
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --%s and not in a cluster (%w): TokenReview needs a kubeconfig", flagServeKubeconfig, err)
	}
	cfg.UserAgent = "vigil-manager-datapath/" + vigil.Version
	return cfg, nil
}
