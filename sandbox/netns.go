package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"strings"
)

// ip runs the ip(8) command and returns its error with its output.
func ip(args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// linkNames returns the network namespace and veth names of node (or rack)
// index i of sandbox name; the namespace is named after the node's name, member.
// Interface names are at most 15 bytes, so the sandbox name is hashed.
func linkNames(name, member string, i int) (netns, hostVeth, nodeVeth string) {
	h := fnv.New32a()
	h.Write([]byte(name))
	id := fmt.Sprintf("%05x", h.Sum32()&0xfffff)
	return fmt.Sprintf("vigil-%s-%s", name, member), fmt.Sprintf("vg%sh%d", id, i), fmt.Sprintf("vg%sn%d", id, i)
}

func netnsExists(name string) bool {
	_, err := os.Stat("/run/netns/" + name)
	return err == nil
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// createLink creates node n's network namespace and a veth pair: the host end keeps
// n.HostIP/30 in the host's namespace, the node end n.NodeIP/30 in n's namespace,
// whose loopback is brought up. Partial results are left for deleteLink.
func createLink(n *nodeState) error {
	if linkExists(n.HostVeth) || netnsExists(n.NetNS) {
		return fmt.Errorf("%w: veth %s or netns %s already exists (another sandbox, or a leftover: run `vigil-sandbox down`)",
			ErrAlreadyUp, n.HostVeth, n.NetNS)
	}
	steps := [][]string{
		{"netns", "add", n.NetNS},
		{"link", "add", n.HostVeth, "type", "veth", "peer", "name", n.NodeVeth},
		{"link", "set", n.NodeVeth, "netns", n.NetNS},
		{"addr", "add", n.HostIP + "/30", "dev", n.HostVeth},
		{"link", "set", n.HostVeth, "up"},
		{"-n", n.NetNS, "addr", "add", n.NodeIP + "/30", "dev", n.NodeVeth},
		{"-n", n.NetNS, "link", "set", n.NodeVeth, "up"},
		{"-n", n.NetNS, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return fmt.Errorf("create link of %s: %w", n.Name, err)
		}
	}
	return nil
}

// deleteLink removes node n's veth pair and namespace; what is already gone is fine.
func deleteLink(n *nodeState) error {
	var errs []error
	if linkExists(n.HostVeth) {
		if err := ip("link", "del", n.HostVeth); err != nil {
			errs = append(errs, err)
		}
	}
	if netnsExists(n.NetNS) {
		if err := ip("netns", "del", n.NetNS); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hostHasAddr reports whether addr is assigned to an interface of the host.
func hostHasAddr(addr string) bool {
	out, err := exec.Command("ip", "-o", "addr", "show", "to", addr+"/32").Output()
	return err == nil && len(bytes.TrimSpace(out)) > 0
}
