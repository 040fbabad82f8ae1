package chaos

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// evidenceCap is the most of one log a failed cycle keeps: its last bytes,
// where the failed cycle is.
const evidenceCap = 16 << 20

// SaveEvidence copies every log under workDir (the managers', the datapath's,
// each node's engine, kwok and kubelet stand-in, the API server's and the audit
// log) into dir, under the same relative paths, keeping at most the last
// evidenceCap bytes of each. A failed cycle's sandbox is torn down at the end of
// the run; this is what is left to explain it. It returns how many files it
// copied.
func SaveEvidence(workDir, dir string) (int, error) {
	mounts := mountPoints()
	n := 0
	err := filepath.WalkDir(workDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil // a process's directory went away mid-walk
			}
			return err
		}
		if d.IsDir() && path != workDir && mounts[path] {
			return fs.SkipDir // a pod's volume (maybe of a cut node: reading it could hang)
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".log") {
			return nil
		}
		rel, err := filepath.Rel(workDir, path)
		if err != nil {
			return err
		}
		if err := copyTail(path, filepath.Join(dir, rel), evidenceCap); err != nil {
			return fmt.Errorf("save %s: %w", rel, err)
		}
		n++
		return nil
	})
	return n, err
}

// copyTail copies the last max bytes of src to dst, creating dst's directory.
func copyTail(src, dst string, max int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if st.Size() > max {
		if _, err := in.Seek(st.Size()-max, io.SeekStart); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.LimitReader(in, max)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
