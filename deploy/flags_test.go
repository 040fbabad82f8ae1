package deploy_test

import (
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vigil-storage/vigil/deploy/deploytest"
	enginenode "github.com/vigil-storage/vigil/engine-node"
	"github.com/vigil-storage/vigil/manager"
)

// binDir is where the vigil image puts the binaries of `make build`
// (sandbox/images.BinDir).
const binDir = "/usr/local/bin"

// pendingFlags are flags the manifests give that the code does not have yet:
// the manifests are written ahead of the code. Each entry names who
// adds it. When one lands, this test fails until it is taken off the list, so
// the list never outlives the gap.
var pendingFlags = map[string]string{}

// binaries are the commands `make build` produces: every directory of cmd/.
func binaries(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(filepath.Dir(deploytest.Dir()), "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// apps are the command lines of Vigil's binaries, by name.
func apps() map[string]*cli.App {
	return map[string]*cli.App{"vigil-manager": manager.App(), manager.DatapathBinary: manager.DatapathApp(), "vigil-engine-node": enginenode.App(nil)}
}

// TestWorkloads_VigilCommands_FlagsExist: every Vigil container runs a binary
// of `make build` with a subcommand and flags that binary has (or that are on
// the pendingFlags list), in --name=value form, gives every required flag, and
// refers only to environment variables it defines.
func TestWorkloads_VigilCommands_FlagsExist(t *testing.T) {
	ws, err := deploytest.Workloads(build(t, "base"))
	if err != nil {
		t.Fatal(err)
	}
	bins := binaries(t)
	pending := map[string]bool{}
	n := 0
	for _, w := range ws {
		for _, c := range w.Spec.Containers {
			if !isVigil(c) {
				continue
			}
			n++
			for _, err := range checkCommand(c, bins, apps(), pending) {
				t.Errorf("%s/%s: %v", w.Name, c.Name, err)
			}
		}
	}
	if n != 6 {
		t.Errorf("%d Vigil containers, want 6 (manager, datapath, CSI controller, engine, fd keeper, certs ensure)", n)
	}
	for k, why := range pendingFlags {
		if !pending[k] {
			t.Errorf("pendingFlags: %q (%s) now exists or is no longer used; take it off the list", k, why)
		}
	}
}

func isVigil(c corev1.Container) bool { return strings.HasPrefix(c.Image, "vigil-storage/vigil:") }

// checkCommand checks one container's command line against the binaries'
// urfave/cli definitions; pending collects the pendingFlags entries it met.
func checkCommand(c corev1.Container, bins []string, apps map[string]*cli.App, pending map[string]bool) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Command) != 1 || path.Dir(c.Command[0]) != binDir {
		return []error{fmt.Errorf("command %q: want one binary of %s (set command, not only args)", c.Command, binDir)}
	}
	bin := path.Base(c.Command[0])
	app, ok := apps[bin]
	if !slices.Contains(bins, bin) || !ok {
		return []error{fmt.Errorf("%s is not a binary of `make build` with a known command line (have %v)", bin, bins)}
	}
	cmds, flags := app.Commands, map[string]cli.Flag{}
	var words []string
	args := c.Args
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		i := slices.IndexFunc(cmds, func(cmd *cli.Command) bool { return cmd.HasName(args[0]) })
		if i < 0 {
			return append(errs, fmt.Errorf("%s %s: no such subcommand", bin, strings.Join(append(words, args[0]), " ")))
		}
		words = append(words, args[0])
		flags = map[string]cli.Flag{}
		for _, f := range cmds[i].Flags {
			for _, n := range f.Names() {
				flags[n] = f
			}
		}
		cmds, args = cmds[i].Subcommands, args[1:]
	}
	if len(words) == 0 {
		return append(errs, fmt.Errorf("%s: no subcommand", bin))
	}
	where := bin + " " + strings.Join(words, " ")
	given := map[string]bool{}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			bad("%s: argument %q: write every flag as --name=value", where, a)
			continue
		}
		given[name] = true
		if _, ok := flags[name]; !ok {
			if _, isPending := pendingFlags[where+" --"+name]; isPending {
				pending[where+" --"+name] = true
			} else {
				bad("%s has no flag --%s", where, name)
			}
		}
		for _, m := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(value, -1) {
			if !env[m[1]] {
				bad("%s --%s: $(%s) is not an environment variable of the container", where, name, m[1])
			}
		}
	}
	for _, f := range flags {
		rf, ok := f.(cli.RequiredFlag)
		if !ok || !rf.IsRequired() {
			continue
		}
		name := f.Names()[0]
		fromEnv := false
		if ef, ok := f.(interface{ GetEnvVars() []string }); ok {
			fromEnv = slices.ContainsFunc(ef.GetEnvVars(), func(e string) bool { return env[e] })
		}
		if given[name] || fromEnv {
			continue
		}
		if key := where + " --" + name + " (required, not given)"; pendingFlags[key] != "" {
			pending[key] = true
			continue
		}
		bad("%s: required flag --%s is not given", where, name)
	}
	return errs
}

func TestCheckCommand_BadInput(t *testing.T) {
	bins := []string{"vigil-manager", "vigil-engine-node", "vigil-sandbox"}
	good := corev1.Container{Command: []string{"/usr/local/bin/vigil-manager"},
		Args: []string{"csi", "serve", "--csi-endpoint=unix:///csi/csi.sock", "--datapath-token-file=/t"}}
	if errs := checkCommand(good, bins, apps(), map[string]bool{}); len(errs) > 0 {
		t.Fatalf("a good command refused: %v", errs)
	}
	for name, c := range map[string]corev1.Container{
		"no command":           {Args: good.Args},
		"not a binary":         {Command: []string{"/usr/local/bin/vigil-ctl"}, Args: good.Args},
		"elsewhere":            {Command: []string{"/bin/vigil-manager"}, Args: good.Args},
		"unknown subcommand":   {Command: good.Command, Args: []string{"csi", "listen"}},
		"no subcommand":        {Command: good.Command, Args: []string{"--csi-endpoint=x"}},
		"unknown flag":         {Command: good.Command, Args: append(slices.Clone(good.Args), "--no-such-flag=1")},
		"flag value apart":     {Command: good.Command, Args: []string{"csi", "serve", "--csi-endpoint", "unix:///x", "--datapath-token-file=/t"}},
		"required missing":     {Command: good.Command, Args: []string{"csi", "serve", "--csi-endpoint=unix:///x"}},
		"undefined env":        {Command: good.Command, Args: append(slices.Clone(good.Args), "--datapath=$(DP_ADDR)")},
		"parent flag on child": {Command: good.Command, Args: []string{"settings", "list", "--listen=:1"}},
	} {
		if errs := checkCommand(c, bins, apps(), map[string]bool{}); len(errs) == 0 {
			t.Errorf("%s: not noticed", name)
		}
	}
}

// TestWorkloads_Wiring_Consistent: the values the flags carry fit the rest of
// the manifests: the settings store and overlay exist and are mounted, the
// datapath address is the datapath's Service and port, datapath tokens are
// projected for the audience vigil-datapath, and in each pod the CSI socket of
// Vigil and of its sidecars is one file (the engine's, which the kubelet
// reaches, checkRegistration).
func TestWorkloads_Wiring_Consistent(t *testing.T) {
	// The sandbox's overlay runs one datapath server, its clients through
	// the Service: the same checks hold.
	for _, k := range []string{"base", "overlays/sandbox"} {
		for _, err := range checkWiring(t, build(t, k)) {
			t.Errorf("%s: %v", k, err)
		}
	}
}

func checkWiring(t *testing.T, objs []*unstructured.Unstructured) []error {
	t.Helper()
	ws, err := deploytest.Workloads(objs)
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	var svc corev1.Service
	decode(t, objs, "Service", "vigil-datapath", &svc)
	for _, w := range ws {
		sockets := map[string]string{} // container/flag -> where the socket lives
		for _, c := range w.Spec.Containers {
			for flag, v := range flagValues(c) {
				id := w.Name + "/" + c.Name + " --" + flag
				switch flag {
				case "settings-store":
					ns, name, _ := strings.Cut(strings.TrimPrefix(v, "configmap:"), "/")
					if !strings.HasPrefix(v, "configmap:") || deploytest.Find(objs, "ConfigMap", name) == nil || ns != svc.Namespace {
						bad("%s=%s: want configmap:NS/NAME of a ConfigMap of the manifests", id, v)
					}
				case "settings-dir":
					if got := hostPath(w.Spec, c, v); got != "configMap:vigil-settings-managed" {
						bad("%s=%s: mounts %q, want the ConfigMap vigil-settings-managed", id, v, got)
					}
				case "datapath":
					list := envValue(t, objs, c, v)
					if err := checkServerList(objs, svc, list); err != nil {
						bad("%s=%s (%s): %v", id, v, list, err)
					}
				case "raft-peers":
					list := envValue(t, objs, c, v)
					if err := checkRaftPeers(objs, list); err != nil {
						bad("%s=%s (%s): %v", id, v, list, err)
					}
				case "datapath-token-file":
					if !projectedToken(w.Spec, c, v, "vigil-datapath") {
						bad("%s=%s: not a projected ServiceAccount token for the audience vigil-datapath", id, v)
					}
				case "csi-endpoint", "csi-address":
					p := strings.TrimPrefix(v, "unix://")
					where := hostPath(w.Spec, c, p)
					if where == "" {
						bad("%s=%s: the socket is on no volume", id, v)
					}
					sockets[id] = where
				}
			}
		}
		places := map[string]bool{}
		for _, where := range sockets {
			places[where] = true
		}
		if len(places) > 1 {
			bad("%s: the CSI socket flags point to different files: %v", w.Name, sockets)
		}
	}
	var sts struct{ ports []int32 }
	for _, w := range ws {
		if w.Name == "vigil-datapath" {
			for flag, v := range flagValues(w.Spec.Containers[0]) {
				if flag == "listen" {
					_, port, _ := net.SplitHostPort(v)
					p, _ := strconv.Atoi(port)
					sts.ports = append(sts.ports, int32(p))
				}
			}
			for _, cp := range w.Spec.Containers[0].Ports {
				if cp.Name == svc.Spec.Ports[0].TargetPort.StrVal && !slices.Contains(sts.ports, cp.ContainerPort) {
					bad("the datapath listens on %v, but its Service targets port %d", sts.ports, cp.ContainerPort)
				}
			}
		}
	}
	return errs
}

// envValue is v with a $(VAR) of container c's environment replaced by
// its value, a literal or a key of a ConfigMap of the manifests.
func envValue(t *testing.T, objs []*unstructured.Unstructured, c corev1.Container, v string) string {
	t.Helper()
	name, ok := strings.CutPrefix(v, "$(")
	if !ok || !strings.HasSuffix(name, ")") {
		return v
	}
	name = strings.TrimSuffix(name, ")")
	for _, e := range c.Env {
		switch {
		case e.Name != name:
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			var cm corev1.ConfigMap
			decode(t, objs, "ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name, &cm)
			return cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
		default:
			return e.Value
		}
	}
	return v
}

// datapathServers are the stable names of the datapath StatefulSet's pods
// (POD.SERVICE.NS.svc), with its port named port.
func datapathServers(objs []*unstructured.Unstructured, port string) ([]string, error) {
	o := deploytest.Find(objs, "StatefulSet", "vigil-datapath")
	if o == nil {
		return nil, fmt.Errorf("no StatefulSet vigil-datapath")
	}
	replicas, _, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
	peers, _, _ := unstructured.NestedString(o.Object, "spec", "serviceName")
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	var p int64
	ports, _, _ := unstructured.NestedSlice(cs[0].(map[string]any), "ports")
	for _, x := range ports {
		if m := x.(map[string]any); m["name"] == port {
			p, _ = m["containerPort"].(int64)
		}
	}
	var out []string
	for i := range replicas {
		out = append(out, fmt.Sprintf("%s-%d.%s.%s.svc:%d", o.GetName(), i, peers, o.GetNamespace(), p))
	}
	return out, nil
}

// checkServerList: a client's --datapath names every datapath server by
// its stable name, in order, or the Service (one server).
func checkServerList(objs []*unstructured.Unstructured, svc corev1.Service, list string) error {
	servers, err := datapathServers(objs, "datapath")
	if err != nil {
		return err
	}
	service := fmt.Sprintf("%s.%s.svc:%d", svc.Name, svc.Namespace, svc.Spec.Ports[0].Port)
	if list != strings.Join(servers, ",") && !(list == service && len(servers) == 1) {
		return fmt.Errorf("want every server of the StatefulSet, %s (or with one server the Service %s)", strings.Join(servers, ","), service)
	}
	return nil
}

// checkRaftPeers: the datapath's --raft-peers name every server, its id its
// pod's name, at its stable name and Raft port, then (after @) its clients'
// port, so the group records every server's datapath address at once.
func checkRaftPeers(objs []*unstructured.Unstructured, list string) error {
	servers, err := datapathServers(objs, "raft")
	if err != nil {
		return err
	}
	clients, err := datapathServers(objs, "datapath")
	if err != nil {
		return err
	}
	var want []string
	for i, srv := range servers {
		pod, _, _ := strings.Cut(srv, ".")
		want = append(want, pod+"="+srv+"@"+clients[i])
	}
	if list != strings.Join(want, ",") {
		return fmt.Errorf("want %s", strings.Join(want, ","))
	}
	return nil
}

// flagValues are a container's --name=value arguments.
func flagValues(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, a := range c.Args {
		if name, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok && strings.HasPrefix(a, "--") {
			out[name] = v
		}
	}
	return out
}

// projectedToken reports whether file is a ServiceAccount token for audience
// projected into container c.
func projectedToken(spec corev1.PodSpec, c corev1.Container, file, audience string) bool {
	where := hostPath(spec, c, file)
	vol, rest, ok := strings.Cut(strings.TrimPrefix(where, "projected:"), "/")
	if !ok || !strings.HasPrefix(where, "projected:") {
		return false
	}
	for _, v := range spec.Volumes {
		if v.Name != vol || v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil && s.ServiceAccountToken.Audience == audience && s.ServiceAccountToken.Path == rest {
				return true
			}
		}
	}
	return false
}

func TestCheckWiring_BadInput(t *testing.T) {
	for name, breakIt := range map[string]func(objs []*unstructured.Unstructured){
		"datapath address": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "Deployment", "vigil-manager", "--datapath=", "--datapath=vigil-datapath:9600")
		},
		"datapath servers but one": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "DaemonSet", "vigil-engine-node", "--datapath=",
				"--datapath=vigil-datapath-0.vigil-datapath-peers.vigil-system.svc:9600,vigil-datapath-1.vigil-datapath-peers.vigil-system.svc:9600")
		},
		"raft peers at the clients' port": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "StatefulSet", "vigil-datapath", "--raft-peers=",
				"--raft-peers=vigil-datapath-0=vigil-datapath-0.vigil-datapath-peers.vigil-system.svc:9600,vigil-datapath-1=vigil-datapath-1.vigil-datapath-peers.vigil-system.svc:9600,vigil-datapath-2=vigil-datapath-2.vigil-datapath-peers.vigil-system.svc:9600")
		},
		"token audience": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "DaemonSet", "vigil-engine-node", "--datapath-token-file=", "--datapath-token-file=/var/run/secrets/kubernetes.io/serviceaccount/token")
		},
		"socket": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "Deployment", "vigil-csi-controller", "--csi-address=", "--csi-address=/csi/other.sock")
		},
		"socket on no volume": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "DaemonSet", "vigil-engine-node", "--csi-endpoint=", "--csi-endpoint=unix:///run/csi.sock")
		},
		"settings dir": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "Deployment", "vigil-manager", "--settings-dir=", "--settings-dir=/etc/other")
		},
		"settings store": func(objs []*unstructured.Unstructured) {
			setArg(t, objs, "Deployment", "vigil-manager", "--settings-store=", "--settings-store=configmap:vigil-system/nothing")
		},
	} {
		objs := build(t, "base")
		breakIt(objs)
		if errs := checkWiring(t, objs); len(errs) == 0 {
			t.Errorf("%s: not noticed", name)
		}
	}
}

// setArg replaces the argument starting with prefix in the first container of
// the workload kind/name that has one.
func setArg(t *testing.T, objs []*unstructured.Unstructured, kind, name, prefix, arg string) {
	t.Helper()
	o := deploytest.Find(objs, kind, name)
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		cm := c.(map[string]any)
		args, _ := cm["args"].([]any)
		for i, a := range args {
			if strings.HasPrefix(a.(string), prefix) {
				args[i] = arg
				if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers"); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
	}
	t.Fatalf("%s %s has no argument %s…", kind, name, prefix)
}
