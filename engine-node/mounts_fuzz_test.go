package enginenode

import (
	"strings"
	"testing"
)

// FuzzParseMountInfo: any input is parsed or refused, never a panic, and
// unescaping only ever shortens a field.
func FuzzParseMountInfo(f *testing.F) {
	f.Add("36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw\n")
	f.Add("37 35 0:5 / /var/lib/x rw - fuse.vigil vigil-disk rw\n")
	f.Add("1 2 3 4 5 6 -\n")
	f.Add("\\")
	f.Fuzz(func(t *testing.T, in string) {
		mounts, err := parseMountInfo(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, m := range mounts {
			if len(m.MountPoint) > len(in) || len(m.Source) > len(in) {
				t.Fatalf("unescaping grew %q into %+v", in, m)
			}
		}
	})
}
