package enginenode

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/internal/testenv"
)

// fioRuntime is how long each fio job writes, after a ramp of 2 s.
const fioRuntime = "10"

// BenchmarkFio_RandomWrite4KiB runs fio's 4 KiB random writes (O_DIRECT, so
// every write goes through the whole stack and not only into the page cache)
// against a file on a Vigil volume staged by this node service (ext4, loop
// device, FUSE, datapath client, a real datapath server on loopback) and
// against a file in a directory of the same disk, one after the other:
//   - qd=1: one writer, one write at a time (psync), as a database's log;
//   - qd=16: libaio with 16 writes in flight;
//
// each in plaintext and over TLS (",tls": the server's certificate verified
// by the client).
//
// Each fio job lasts 10 s; run it once: -benchtime 1x. Reports IOPS of both
// and their ratio, and the volume's 99th percentile completion latency.
func BenchmarkFio_RandomWrite4KiB(b *testing.B) {
	requireRealStack(b)
	testenv.RequireTool(b, "fio", "fio")
	for _, tls := range []bool{false, true} {
		for _, qd := range []int{1, 16} {
			name := fmt.Sprintf("qd=%d", qd)
			if tls {
				name += ",tls"
			}
			b.Run(name, func(b *testing.B) { benchFio(b, qd, tls) })
		}
	}
}

func benchFio(b *testing.B, qd int, tls bool) {
	srv := datapathtest.StartWith(b, datapathtest.Config{TLS: tls, Options: datapath.Options{Logger: quiet}})
	var opts []client.Option
	if tls {
		opts = append(opts, client.WithCAFile(srv.CAFile))
	}
	c := srv.DialRoles(b, opts...)
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, "bench-fio", 1<<30, datapath.AccessRWO)
	if err != nil {
		b.Fatal(err)
	}
	epoch, err := c.Grant(ctx, vol.ID, "bench-node")
	if err != nil {
		b.Fatal(err)
	}
	n := newTestServer(b, c, "bench-node")
	staging := b.TempDir()
	if _, err := n.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
		b.Fatal(err)
	}
	local := b.TempDir()
	var vIOPS, lIOPS, vP99 float64
	for i := 0; i < b.N; i++ {
		v := runFio(b, filepath.Join(staging, "fio.dat"), qd)
		l := runFio(b, filepath.Join(local, "fio.dat"), qd)
		vIOPS += v.IOPS
		lIOPS += l.IOPS
		vP99 += v.P99ms
	}
	b.ReportMetric(vIOPS/float64(b.N), "volume-IOPS")
	b.ReportMetric(lIOPS/float64(b.N), "localfile-IOPS")
	b.ReportMetric(vIOPS/lIOPS, "ratio")
	b.ReportMetric(vP99/float64(b.N), "volume-p99-ms")
}

type fioResult struct {
	IOPS  float64
	P99ms float64
}

// runFio runs one fio job of 4 KiB O_DIRECT random writes over a 256 MiB file
// at path with qd writes in flight and returns its write IOPS and p99.
func runFio(b *testing.B, path string, qd int) fioResult {
	b.Helper()
	engine := "psync"
	if qd > 1 {
		engine = "libaio"
	}
	out, err := exec.Command("fio", "--name=randwrite", "--filename="+path, "--rw=randwrite", "--bs=4k",
		"--size=256M", "--direct=1", "--ioengine="+engine, fmt.Sprintf("--iodepth=%d", qd),
		"--time_based", "--runtime="+fioRuntime, "--ramp_time=2", "--randrepeat=0",
		"--output-format=json").Output()
	if err != nil {
		b.Fatalf("fio on %s: %v\n%s", path, err, out)
	}
	var rep struct {
		Jobs []struct {
			Write struct {
				IOPS  float64 `json:"iops"`
				ClatN struct {
					Percentile map[string]float64 `json:"percentile"`
				} `json:"clat_ns"`
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Jobs) != 1 {
		b.Fatalf("fio on %s: unreadable report (%v): %.500s", path, err, out)
	}
	w := rep.Jobs[0].Write
	return fioResult{IOPS: w.IOPS, P99ms: w.ClatN.Percentile["99.000000"] / 1e6}
}
