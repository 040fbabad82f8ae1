package enginenode

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestJournal_Reopen_KeepsRecordsAndTellsReboot(t *testing.T) {
	dir := t.TempDir()
	j, prev, err := OpenJournal(dir, "boot-1")
	if err != nil || prev != "" {
		t.Fatalf("first open: previous %q, %v", prev, err)
	}
	st := StageRecord{VolumeID: "vol/1", StagingPath: "/s", Epoch: 7, Size: 1 << 20, DiskDir: "/d", Phase: PhaseStaged}
	pub := PublishRecord{VolumeID: "vol/1", TargetPath: "/t", StagingPath: "/s", PodUID: "u", Phase: PhasePublished}
	if err := j.PutStage(st); err != nil {
		t.Fatal(err)
	}
	if err := j.PutPublish(pub); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j, prev, err = OpenJournal(dir, "boot-1")
	if err != nil || prev != "boot-1" {
		t.Fatalf("restart: previous %q, %v", prev, err)
	}
	got, ok, err := j.Stage("vol/1")
	if err != nil || !ok || got.Epoch != 7 || got.Phase != PhaseStaged || got.Updated.IsZero() || got.Boot != "boot-1" {
		t.Fatalf("stage after reopen = %+v, %t, %v", got, ok, err)
	}
	pubs, err := j.PublishesOf("vol/1")
	if err != nil || len(pubs) != 1 || pubs[0].PodUID != "u" {
		t.Fatalf("publishes after reopen = %+v, %v", pubs, err)
	}
	if err := j.DeletePublish("/t"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := j.Publish("/t"); ok {
		t.Fatal("deleted publish still there")
	}
	j.Close()

	// After a reboot the old boot id stays until RecordBoot.
	for i := 0; i < 2; i++ {
		j, prev, err = OpenJournal(dir, "boot-2")
		if err != nil || prev != "boot-1" {
			t.Fatalf("after reboot, open #%d: previous %q, %v; want boot-1", i+1, prev, err)
		}
		j.Close()
	}
	j, _, _ = OpenJournal(dir, "boot-2")
	if err := j.PutStage(st); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := j.Stage("vol/1"); got.Boot != "boot-2" {
		t.Fatalf("stage rewritten in boot-2 is of boot %q", got.Boot)
	}
	if err := j.RecordBoot(); err != nil {
		t.Fatal(err)
	}
	if b, err := j.RecordedBoot(); err != nil || b != "boot-2" {
		t.Fatalf("recorded boot %q, %v; want boot-2", b, err)
	}
	j.Close()
	j, prev, err = OpenJournal(dir, "boot-2")
	if err != nil || prev != "boot-2" {
		t.Fatalf("restart after RecordBoot: previous %q, %v; want boot-2", prev, err)
	}
	j.Close()
}

func TestOpenJournal_EmptyBootID_Refused(t *testing.T) {
	if _, _, err := OpenJournal(t.TempDir(), ""); !errors.Is(err, ErrEmptyBootID) {
		t.Fatalf("got %v, want ErrEmptyBootID", err)
	}
}

func TestReadBootID_File_Trimmed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(p, []byte("abc-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if id, err := ReadBootID(p); err != nil || id != "abc-123" {
		t.Fatalf("got %q, %v", id, err)
	}
	if err := os.WriteFile(p, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBootID(p); !errors.Is(err, ErrEmptyBootID) {
		t.Fatalf("empty file: %v", err)
	}
}

func TestParseMountInfo_EscapesAndOptionalFields(t *testing.T) {
	in := "36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"37 35 0:5 / /var/lib/x rw - fuse.vigil vigil-disk rw\n"
	got, err := parseMountInfo(bytesReader(in))
	if err != nil || len(got) != 2 {
		t.Fatalf("got %+v, %v", got, err)
	}
	if got[0].MountPoint != "/mnt/with space" || got[0].FsType != "ext3" || got[1].Source != "vigil-disk" {
		t.Fatalf("parsed %+v", got)
	}
	if _, err := parseMountInfo(bytesReader("garbage\n")); err == nil {
		t.Fatal("malformed line accepted")
	}
}
