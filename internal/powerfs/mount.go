package powerfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FsName is the source shown for the layer's mounts in /proc/self/mountinfo.
const FsName = "vigil-powerfs"

// ReadyLine is what Serve writes (with a newline) once the mount serves: a
// parent that started the layer as a process waits for it.
const ReadyLine = "powerfs: serving"

// Options tune a mount. The zero value is usable.
type Options struct {
	// Debug logs every FUSE request to stderr.
	Debug bool
}

// Server is one mounted layer.
type Server struct {
	srv        *fuse.Server
	mountpoint string
}

// Usable reports why this machine cannot mount the layer, or nil: it needs
// root (CAP_SYS_ADMIN, there is no fusermount) and /dev/fuse.
func Usable() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("powerfs mounts FUSE without fusermount and needs root; running as uid %d", os.Geteuid())
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("powerfs needs /dev/fuse: %w", err)
	}
	return f.Close()
}

// Mount serves backing (an existing directory) at mountpoint (an existing
// directory) until Unmount or the end of the process. Everything written
// through the mount and not yet fsynced lives only in this process.
func Mount(backing, mountpoint string, o Options) (*Server, error) {
	for _, d := range []struct{ what, path string }{{"backing directory", backing}, {"mount point", mountpoint}} {
		fi, err := os.Stat(d.path)
		if err != nil {
			return nil, fmt.Errorf("powerfs: %s: %w", d.what, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("powerfs: %s %s is not a directory", d.what, d.path)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("powerfs: backing directory: %w", err)
	}
	rootData := &fs.LoopbackRoot{Path: backing, Dev: st.Dev}
	root := &node{LoopbackNode: &fs.LoopbackNode{RootData: rootData}, l: &layer{files: map[fileKey]*fileState{}}}
	rootData.RootNode = root
	timeout := time.Second // every change comes through this mount
	srv, err := fs.Mount(mountpoint, root, &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:            FsName,
			Name:              "vigil-powerfs",
			DirectMountStrict: true,
			AllowOther:        true,
			MaxWrite:          1 << 20,
			Debug:             o.Debug,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("powerfs: mount %s at %s: %w", backing, mountpoint, err)
	}
	return &Server{srv: srv, mountpoint: mountpoint}, nil
}

// Unmount unmounts and waits for the server to stop. What was pending is
// dropped, as by a power cut.
func (s *Server) Unmount() error {
	if err := s.srv.Unmount(); err != nil {
		return fmt.Errorf("powerfs: unmount %s: %w", s.mountpoint, err)
	}
	s.srv.Wait()
	return nil
}

// Serve mounts the layer, writes ReadyLine to ready, and serves until ctx
// ends; then it unmounts (dropping what was pending).
func Serve(ctx context.Context, backing, mountpoint string, o Options, ready *os.File) error {
	if err := Detach(mountpoint); err != nil {
		return err
	}
	s, err := Mount(backing, mountpoint, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(ready, "%s %s at %s\n", ReadyLine, backing, mountpoint)
	done := make(chan struct{})
	go func() { s.srv.Wait(); close(done) }()
	select {
	case <-ctx.Done():
		return s.Unmount()
	case <-done:
		return errors.New("powerfs: the mount was unmounted from outside")
	}
}

// Detach lazily unmounts a layer left at mountpoint by a process that died
// (umount -l); a mount point with no layer on it is left alone.
func Detach(mountpoint string) error {
	on, err := Mounted(mountpoint)
	if err != nil || !on {
		return err
	}
	if err := unix.Unmount(mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("powerfs: detach the dead mount at %s: %w", mountpoint, err)
	}
	return nil
}

// Mounted reports whether a layer is mounted at mountpoint (alive or dead).
func Mounted(mountpoint string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != mountpoint {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+2 < len(fields) && fields[i+2] == FsName {
				return true, nil
			}
		}
	}
	return false, sc.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes of space, tab, newline
// and backslash.
func unescapeMountinfo(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}
