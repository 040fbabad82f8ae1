package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestContainerdConfig_TOML(t *testing.T) {
	c := ContainerdConfig{Dir: "/tmp/n1"}
	got := c.TOML()
	for _, want := range []string{
		"version = 2\n", `root = "/tmp/n1/root"`, `state = "/tmp/n1/state"`,
		"[grpc]\n  address = \"/tmp/n1/containerd.sock\"", `path = "/tmp/n1/opt"`,
		"[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"localhost/vigil-pause:dev\"\n  restrict_oom_score_adj = true",
		`conf_dir = "/tmp/n1/cni/net.d"`, `bin_dir = "/usr/lib/cni"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("config lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Root =") {
		t.Errorf("runc's root set without RuncRoot:\n%s", got)
	}
	if c.Socket() != "/tmp/n1/containerd.sock" || c.Args()[2] != "/tmp/n1/config.toml" {
		t.Errorf("socket %s, args %q", c.Socket(), c.Args())
	}
}

func TestContainerdConfig_BadInput(t *testing.T) {
	for dir, mention := range map[string]string{
		"relative":                     "want an absolute path",
		"/" + strings.Repeat("d", 100): "a unix socket allows 107",
		"/tmp/with\"quote":             "may not hold quotes",
	} {
		err := ContainerdConfig{Dir: dir}.WriteConfig()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), mention) {
			t.Errorf("WriteConfig with Dir %q = %v, want ErrInvalidConfig mentioning %q", dir, err, mention)
		}
	}
}
