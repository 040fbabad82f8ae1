package enginenode

import (
	"fmt"
	"strings"
	"testing"
)

// escapeMountInfo writes s as the kernel writes a field of
// /proc/self/mountinfo (mangle() in fs/proc_namespace.c): space, tab, newline
// and backslash become a backslash and three octal digits; every other byte,
// '\r' and non-ASCII included, is written as it is. It is the test's own
// encoder, independent of the parser's unescaping.
func escapeMountInfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, `\%03o`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// mountInfoLine is one line as the kernel writes it, with n optional fields.
func mountInfoLine(id int, m Mount, n uint8) string {
	optional := []string{"shared:1", "master:7", "propagate_from:2", "unbindable"}
	var opt strings.Builder
	for i := 0; i < int(n%5); i++ {
		opt.WriteString(" " + optional[i%len(optional)])
	}
	return fmt.Sprintf("%d 1 %s / %s %s%s - %s %s rw,errors=remount-ro\n",
		id, m.Dev, escapeMountInfo(m.MountPoint), m.Options, opt.String(), escapeMountInfo(m.FsType), escapeMountInfo(m.Source))
}

// FuzzParseMountInfo: any mount point, source and filesystem type the kernel
// can report (no NUL byte; mount point and type not empty) survive the round
// trip through the kernel's escaping and the parser exactly, with any number
// of optional fields, line by line.
func FuzzParseMountInfo(f *testing.F) {
	f.Add("/mnt/with space", "/dev/root", "ext3", uint8(1))
	f.Add("/var/lib/vigil/disks/0a1b", "vigil-disk", "fuse.vigil", uint8(0))
	f.Add(`/back\slash/\040literal`, "", "tmpfs", uint8(3))
	f.Add("/tab\there/new\nline", "a b\tc", "fuse.x y", uint8(4))
	f.Add("/cr\r/vt\v/ff\f", "nbsp\u00a0nel\u0085", "ext4", uint8(2))
	f.Add("/ - /-", "-", "-", uint8(1))
	f.Fuzz(func(t *testing.T, mountPoint, source, fsType string, optional uint8) {
		if mountPoint == "" || fsType == "" || strings.ContainsRune(mountPoint+source+fsType, 0) {
			return // the kernel never reports these
		}
		want := []Mount{
			{Dev: "7:3", MountPoint: mountPoint, FsType: fsType, Source: source, Options: "rw,relatime"},
			{Dev: "0:52", MountPoint: "/second", FsType: "ext4", Source: "/dev/loop3", Options: "ro"},
		}
		in := mountInfoLine(40, want[0], optional) + mountInfoLine(41, want[1], optional+1)
		got, err := parseMountInfo(strings.NewReader(in))
		if err != nil {
			t.Fatalf("parse %q: %v", in, err)
		}
		if len(got) != len(want) {
			t.Fatalf("parse %q: %d mounts, want %d: %+v", in, len(got), len(want), got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("parse %q: line %d\n got %+v\nwant %+v", in, i+1, got[i], want[i])
			}
		}
	})
}

// FuzzParseMountInfo_Any: any input is parsed or refused, never a panic, and
// what is parsed is a fixed point: written back the kernel's way and parsed
// again, it gives the same mounts.
func FuzzParseMountInfo_Any(f *testing.F) {
	f.Add("36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw\n")
	f.Add("37 35 0:5 / /var/lib/x rw - fuse.vigil vigil-disk rw\n")
	f.Add("1 2 3 4 5 6 -\n")
	f.Add("1 2 3 4 5 6 - a  \n")
	f.Add("\\")
	f.Fuzz(func(t *testing.T, in string) {
		mounts, err := parseMountInfo(strings.NewReader(in))
		if err != nil {
			return
		}
		var again strings.Builder
		for i, m := range mounts {
			if m.MountPoint == "" || m.FsType == "" || m.Dev == "" || m.Options == "" {
				t.Fatalf("parse %q accepted a line with an empty field: %+v", in, m)
			}
			again.WriteString(mountInfoLine(i, m, 0))
		}
		back, err := parseMountInfo(strings.NewReader(again.String()))
		if err != nil || len(back) != len(mounts) {
			t.Fatalf("re-encoded %q: %v, %d mounts, want %d", again.String(), err, len(back), len(mounts))
		}
		for i := range mounts {
			if back[i] != mounts[i] {
				t.Fatalf("%q parsed to %+v, re-encoded and parsed to %+v", in, mounts[i], back[i])
			}
		}
	})
}
