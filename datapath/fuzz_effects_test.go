package datapath

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// world is a structured view of a store for the fuzz target's effect checks.
type world struct {
	vols     map[string]volState
	leaving  map[string]leaveRecord
	nodes    map[string]NodeStatus
	data     map[string][]byte // full contents of the harness's two volumes
	capacity int64
}

type volState struct {
	vol   Volume
	epoch uint64
	rows  map[string]Attachment
}

func worldOf(fs fuzzStore) world {
	s := fs.s
	w := world{vols: map[string]volState{}, leaving: map[string]leaveRecord{}, nodes: map[string]NodeStatus{}, data: map[string][]byte{}, capacity: s.capacity}
	vs, _ := s.ListVolumes()
	for _, v := range vs {
		st := volState{vol: v, rows: map[string]Attachment{}}
		st.epoch, _ = s.Epoch(v.ID)
		as, _ := s.Attachments(v.ID)
		for _, a := range as {
			st.rows[a.Node] = a
		}
		w.vols[v.ID] = st
	}
	s.leaves.mu.RLock()
	for n, l := range s.leaves.m {
		w.leaving[n] = l
	}
	s.leaves.mu.RUnlock()
	r, _ := s.Nodes()
	for _, n := range r.Nodes {
		w.nodes[n.Node] = n
	}
	for _, id := range []string{fs.seeded, fs.shared} {
		if _, ok := w.vols[id]; ok {
			w.data[id] = readAll(s, id, w.vols[id].vol.Size)
		}
	}
	return w
}

func readAll(s *Store, id string, size int64) []byte {
	v, err := s.lookup(id)
	if err != nil {
		return nil
	}
	buf := make([]byte, size)
	v.mu.RLock()
	defer v.mu.RUnlock()
	_, _ = v.file.ReadAt(buf, 0)
	return buf
}

// effect checks a successful call: data is the request, resp the answer,
// before and after the states around it. The store is the one after the call.
type effect func(fs fuzzStore, data []byte, resp wire.Message, before, after state) error

// unchanged says whether nothing but the activity record changed.
func unchanged(before, after state) error {
	if before.durable != after.durable {
		return fmt.Errorf("the durable state changed")
	}
	return nil
}

// onlyVolumeChanged checks that every volume but id, every announced stop and
// the harness's data are as before.
func onlyVolumeChanged(b, a world, id string) error {
	for vid, v := range b.vols {
		if vid != id && !reflect.DeepEqual(a.vols[vid], v) {
			return fmt.Errorf("volume %s changed too: %+v -> %+v", vid, v, a.vols[vid])
		}
	}
	for vid := range a.vols {
		if _, ok := b.vols[vid]; !ok && vid != id {
			return fmt.Errorf("volume %s appeared", vid)
		}
	}
	if !reflect.DeepEqual(b.leaving, a.leaving) {
		return fmt.Errorf("announced stops changed: %v -> %v", b.leaving, a.leaving)
	}
	for vid, d := range b.data {
		if ad, ok := a.data[vid]; ok && vid != id && !bytes.Equal(ad, d) {
			return fmt.Errorf("data of volume %s changed", vid)
		}
	}
	return nil
}

// onlyRowChanged checks that volume id changed at most node's row (and its
// epoch).
func onlyRowChanged(b, a world, id, node string) error {
	if err := onlyVolumeChanged(b, a, id); err != nil {
		return err
	}
	bv, av := b.vols[id], a.vols[id]
	if bv.vol != av.vol {
		return fmt.Errorf("volume %s's record changed: %+v -> %+v", id, bv.vol, av.vol)
	}
	for n, r := range bv.rows {
		if n != node && av.rows[n] != r {
			return fmt.Errorf("node %s's row on %s changed: %+v -> %+v", n, id, r, av.rows[n])
		}
	}
	return nil
}

func activityOnly(b, a world, node string, want func(NodeStatus) bool) error {
	for n, s := range b.nodes {
		if n != node && a.nodes[n] != s {
			return fmt.Errorf("node %s's activity changed: %+v -> %+v", n, s, a.nodes[n])
		}
	}
	if !want(a.nodes[node]) {
		return fmt.Errorf("node %s's activity is %+v", node, a.nodes[node])
	}
	return nil
}

func decode[R any, PR interface {
	*R
	wire.Message
}](data []byte) (*R, error) {
	r := PR(new(R))
	if err := r.Unmarshal(data); err != nil {
		return nil, fmt.Errorf("the server accepted a request that does not decode: %v", err)
	}
	return (*R)(r), nil
}

// readOnly is the effect of a call that must change nothing durable and
// answer as check says.
func readOnly(check func(fs fuzzStore, data []byte, resp wire.Message, b world) error) effect {
	return func(fs fuzzStore, data []byte, resp wire.Message, before, after state) error {
		if err := unchanged(before, after); err != nil {
			return err
		}
		return check(fs, data, resp, before.world())
	}
}

var effects = map[string]effect{
	wire.MethodCreateVolume: func(_ fuzzStore, data []byte, resp wire.Message, before, after state) error {
		req, err := decode[wire.CreateVolumeRequest](data)
		if err != nil {
			return err
		}
		v, b, a := resp.(*wire.Volume), before.world(), after.world()
		if v.Name != req.Name || v.Size != req.Size || v.Access != req.Access {
			return fmt.Errorf("answer %+v does not match the request %+v", v, req)
		}
		for id, old := range b.vols {
			if old.vol.Name == req.Name {
				if id != v.ID {
					return fmt.Errorf("existing volume %s answered as %s", id, v.ID)
				}
				return unchanged(before, after)
			}
		}
		if got := a.vols[v.ID]; got.vol != volumeFromWireForTest(v) || len(got.rows) != 0 || got.epoch != 0 {
			return fmt.Errorf("created volume is %+v; answered %+v", got, v)
		}
		return onlyVolumeChanged(b, a, v.ID)
	},
	wire.MethodDeleteVolume: func(_ fuzzStore, data []byte, _ wire.Message, before, after state) error {
		req, err := decode[wire.VolumeRef](data)
		if err != nil {
			return err
		}
		b, a := before.world(), after.world()
		if _, ok := a.vols[req.ID]; ok {
			return fmt.Errorf("volume %s still exists", req.ID)
		}
		for n, r := range b.vols[req.ID].rows {
			if r.Live() {
				return fmt.Errorf("deleted volume %s while node %s held a live grant", req.ID, n)
			}
		}
		return onlyVolumeChanged(b, a, req.ID)
	},
	wire.MethodGetVolume: readOnly(func(_ fuzzStore, data []byte, resp wire.Message, b world) error {
		req, err := decode[wire.VolumeRef](data)
		if err != nil {
			return err
		}
		if got, want := volumeFromWireForTest(resp.(*wire.Volume)), b.vols[req.ID].vol; got != want {
			return fmt.Errorf("answer %+v, volume is %+v", got, want)
		}
		return nil
	}),
	wire.MethodListVolumes: readOnly(func(_ fuzzStore, _ []byte, resp wire.Message, b world) error {
		l := resp.(*wire.VolumeList)
		if len(l.Volumes) != len(b.vols) {
			return fmt.Errorf("%d volumes listed, %d exist", len(l.Volumes), len(b.vols))
		}
		for i := range l.Volumes {
			if got := volumeFromWireForTest(&l.Volumes[i]); b.vols[got.ID].vol != got {
				return fmt.Errorf("listed %+v, volume is %+v", got, b.vols[got.ID].vol)
			}
		}
		return nil
	}),
	wire.MethodCapacity: readOnly(func(_ fuzzStore, _ []byte, resp wire.Message, b world) error {
		used := int64(0)
		for _, v := range b.vols {
			used += v.vol.Size
		}
		if got := resp.(*wire.Int).Value; got != b.capacity-used {
			return fmt.Errorf("capacity %d, want %d", got, b.capacity-used)
		}
		return nil
	}),
	wire.MethodGrant:       grantEffect,
	wire.MethodFence:       fenceEffect,
	wire.MethodRelease:     releaseEffect,
	wire.MethodAttachments: attachmentsEffect,
	wire.MethodWrite:       writeEffect,
	// A new generation: soft state only, nothing durable or recorded changes.
	wire.MethodOpenWriteSession: func(_ fuzzStore, _ []byte, resp wire.Message, before, after state) error {
		if g := resp.(*wire.Generation).Gen; g <= fuzzGen+2 {
			return fmt.Errorf("opened generation %d; the harness opened up to %d already", g, fuzzGen+2)
		}
		return unchanged(before, after)
	},
	wire.MethodRead:  readEffect,
	wire.MethodFlush: flushEffect,
	wire.MethodHeartbeat: func(_ fuzzStore, data []byte, _ wire.Message, before, after state) error {
		req, err := decode[wire.NodeRef](data)
		if err != nil {
			return err
		}
		if err := unchanged(before, after); err != nil {
			return err
		}
		return activityOnly(before.world(), after.world(), req.Node, func(n NodeStatus) bool { return n.LastHeartbeat.Equal(fuzzClock) })
	},
	wire.MethodConnectivity: readOnly(func(_ fuzzStore, _ []byte, resp wire.Message, _ world) error {
		if got := resp.(*wire.Connectivity).Now; got != fuzzClock.UnixNano() {
			return fmt.Errorf("server clock %d, want %d", got, fuzzClock.UnixNano())
		}
		return nil
	}),
	wire.MethodNodeGrants: nodeGrantsEffect,
	wire.MethodFenceNode:  fenceNodeEffect,
	wire.MethodLeave:      leaveEffect,
	wire.MethodNodes:      nodesEffect,
	// No flush fails under the fuzzer: no volume is ever failed.
	wire.MethodFailedVolumes: readOnly(func(_ fuzzStore, _ []byte, resp wire.Message, _ world) error {
		if l := resp.(*wire.FailedList); len(l.Items) != 0 {
			return fmt.Errorf("listed failed volumes %+v; no flush failed", l.Items)
		}
		return nil
	}),
	// The fuzzer's store has no control group: it reports no server.
	wire.MethodServers: readOnly(func(_ fuzzStore, _ []byte, resp wire.Message, _ world) error {
		if l := resp.(*wire.ServerList); len(l.Items) != 0 || l.NowUnix != fuzzClock.UnixNano() {
			return fmt.Errorf("servers %+v at %d; want none at the fuzz clock", l.Items, l.NowUnix)
		}
		return nil
	}),
	// The fuzzer's store has no control group: its own volumes, no server.
	wire.MethodGroupVolumes: readOnly(func(_ fuzzStore, _ []byte, resp wire.Message, b world) error {
		l := resp.(*wire.GroupVolumeList)
		if len(l.Items) != len(b.vols) {
			return fmt.Errorf("%d volumes listed, %d exist", len(l.Items), len(b.vols))
		}
		for _, v := range l.Items {
			if st, ok := b.vols[v.ID]; !ok || v.Name != st.vol.Name || v.Epoch != st.epoch || v.Server != "" {
				return fmt.Errorf("listed %+v, volume is %+v at epoch %d", v, st.vol, st.epoch)
			}
		}
		return nil
	}),
	wire.MethodClearFailure: func(fuzzStore, []byte, wire.Message, state, state) error {
		return errors.New("cleared a failure though no volume is failed")
	},
	// The fuzzer's store has no control group: it has nothing to wait for.
	wire.MethodWaitApplied: func(fuzzStore, []byte, wire.Message, state, state) error {
		return errors.New("confirmed an apply though the store has no control group")
	},
	wire.MethodPrepareVolume: func(fuzzStore, []byte, wire.Message, state, state) error {
		return errors.New("prepared a volume though the store has no control group")
	},
	wire.MethodAddServer: func(fuzzStore, []byte, wire.Message, state, state) error {
		return errors.New("added a server though the store has no control group")
	},
	wire.MethodPrepareReplica: func(fuzzStore, []byte, wire.Message, state, state) error {
		return errors.New("prepared a replica though the store has no control group")
	},
	wire.MethodMarkOutOfSync: func(fuzzStore, []byte, wire.Message, state, state) error {
		return errors.New("took a replica out of sync though the store has no control group")
	},
	wire.MethodDirtyRegions: func(fuzzStore, []byte, wire.Message, state, state) error {
		return errors.New("read a dirty-region map though the store has no control group")
	},
}

func volumeFromWireForTest(v *wire.Volume) Volume {
	return Volume{ID: v.ID, Name: v.Name, Size: v.Size, Access: AccessMode(v.Access), Created: time.Unix(0, v.CreatedUnix).UTC()}
}

func grantEffect(_ fuzzStore, data []byte, resp wire.Message, before, after state) error {
	req, err := decode[wire.AttachRequest](data)
	if err != nil {
		return err
	}
	b, a := before.world(), after.world()
	e := resp.(*wire.Epoch).Epoch
	bv, av := b.vols[req.VolumeID], a.vols[req.VolumeID]
	if row := av.rows[req.Node]; !row.Live() || row.Epoch != e {
		return fmt.Errorf("node's row after the grant is %+v; answered epoch %d", row, e)
	}
	if old := bv.rows[req.Node]; old.Live() {
		if e != old.Epoch {
			return fmt.Errorf("a repeated grant moved the epoch %d -> %d", old.Epoch, e)
		}
		return unchanged(before, after)
	}
	if e != bv.epoch+1 || av.epoch != e {
		return fmt.Errorf("grant epoch %d, volume epoch %d -> %d; want the next one", e, bv.epoch, av.epoch)
	}
	if bv.vol.Access == AccessRWO {
		for n, r := range bv.rows {
			if r.Live() {
				return fmt.Errorf("RWO volume granted while node %s was live", n)
			}
		}
	}
	return onlyRowChanged(b, a, req.VolumeID, req.Node)
}

func fenceEffect(_ fuzzStore, data []byte, resp wire.Message, before, after state) error {
	req, err := decode[wire.AttachRequest](data)
	if err != nil {
		return err
	}
	b, a := before.world(), after.world()
	e := resp.(*wire.Epoch).Epoch
	bv, av := b.vols[req.VolumeID], a.vols[req.VolumeID]
	if row := av.rows[req.Node]; row.State != StateFenced || row.Epoch != e || e != bv.epoch+1 || av.epoch != e {
		return fmt.Errorf("after the fence the row is %+v, volume epoch %d -> %d, answered %d", row, bv.epoch, av.epoch, e)
	}
	return onlyRowChanged(b, a, req.VolumeID, req.Node)
}

func releaseEffect(_ fuzzStore, data []byte, _ wire.Message, before, after state) error {
	req, err := decode[wire.AttachRequest](data)
	if err != nil {
		return err
	}
	b, a := before.world(), after.world()
	old, row := b.vols[req.VolumeID].rows[req.Node], a.vols[req.VolumeID].rows[req.Node]
	if !old.Live() {
		return unchanged(before, after)
	}
	if row.State != StateReleased || row.Epoch != old.Epoch || a.vols[req.VolumeID].epoch != b.vols[req.VolumeID].epoch {
		return fmt.Errorf("after the release the row is %+v (was %+v)", row, old)
	}
	return onlyRowChanged(b, a, req.VolumeID, req.Node)
}

func attachmentsEffect(_ fuzzStore, data []byte, resp wire.Message, before, after state) error {
	req, err := decode[wire.VolumeRef](data)
	if err != nil {
		return err
	}
	if err := unchanged(before, after); err != nil {
		return err
	}
	l, rows := resp.(*wire.AttachmentList), before.world().vols[req.ID].rows
	if len(l.Items) != len(rows) {
		return fmt.Errorf("%d rows answered, %d exist", len(l.Items), len(rows))
	}
	for _, it := range l.Items {
		r := rows[it.Node]
		if it.Epoch != r.Epoch || it.State != string(r.State) || it.UpdatedUnix != r.Updated.UnixNano() {
			return fmt.Errorf("row %+v answered, row is %+v", it, r)
		}
	}
	return nil
}

// ioTargetLive checks that t was a live grant with its epoch before the call.
func ioTargetLive(b world, t wire.IOTarget) error {
	if r := b.vols[t.VolumeID].rows[t.Node]; !r.Live() || r.Epoch != t.Epoch {
		return fmt.Errorf("I/O as (%s, %d) accepted; the row was %+v", t.Node, t.Epoch, r)
	}
	return nil
}

func ioStamped(before, after state, node string) error {
	return activityOnly(before.world(), after.world(), node, func(n NodeStatus) bool { return n.LastIO.Equal(fuzzClock) })
}

func writeEffect(fs fuzzStore, data []byte, _ wire.Message, before, after state) error {
	req, err := decode[wire.WriteRequest](data)
	if err != nil {
		return err
	}
	if s := fs.gens[sessionKey{req.VolumeID, req.Node}]; s.gen == 0 || req.Gen != s.gen || req.Epoch != s.epoch {
		return fmt.Errorf("a write under epoch %d generation %d was applied; the open session is %+v", req.Epoch, req.Gen, s)
	}
	b, a := before.world(), after.world()
	if err := ioTargetLive(b, req.IOTarget); err != nil {
		return err
	}
	want := append([]byte(nil), b.data[req.VolumeID]...)
	copy(want[req.Offset:], req.Data)
	if !bytes.Equal(a.data[req.VolumeID], want) {
		return fmt.Errorf("the volume does not hold exactly the %d bytes written at %d", len(req.Data), req.Offset)
	}
	b.data[req.VolumeID] = want
	if err := onlyVolumeChanged(b, a, ""); err != nil {
		return err
	}
	return ioStamped(before, after, req.Node)
}

func readEffect(_ fuzzStore, data []byte, resp wire.Message, before, after state) error {
	req, err := decode[wire.ReadRequest](data)
	if err != nil {
		return err
	}
	b := before.world()
	if err := ioTargetLive(b, req.IOTarget); err != nil {
		return err
	}
	if err := unchanged(before, after); err != nil {
		return err
	}
	if got, want := resp.(*wire.Data).Data, b.data[req.VolumeID][req.Offset:req.Offset+req.Length]; !bytes.Equal(got, want) {
		return fmt.Errorf("read %d bytes at %d that are not the volume's", len(got), req.Offset)
	}
	return ioStamped(before, after, req.Node)
}

func flushEffect(_ fuzzStore, data []byte, _ wire.Message, before, after state) error {
	req, err := decode[wire.FlushRequest](data)
	if err != nil {
		return err
	}
	if err := ioTargetLive(before.world(), req.IOTarget); err != nil {
		return err
	}
	if err := unchanged(before, after); err != nil {
		return err
	}
	return ioStamped(before, after, req.Node)
}

func nodeGrantsEffect(_ fuzzStore, data []byte, resp wire.Message, before, after state) error {
	req, err := decode[wire.NodeRef](data)
	if err != nil {
		return err
	}
	if err := unchanged(before, after); err != nil {
		return err
	}
	var want []wire.NodeGrant
	for id, v := range before.world().vols {
		if r, ok := v.rows[req.Node]; ok {
			want = append(want, wire.NodeGrant{VolumeID: id, Epoch: r.Epoch, State: string(r.State), UpdatedUnix: r.Updated.UnixNano()})
		}
	}
	sort.Slice(want, func(i, j int) bool { return want[i].VolumeID < want[j].VolumeID })
	if l := resp.(*wire.NodeGrantList); l.Node != req.Node || fmt.Sprint(l.Items) != fmt.Sprint(want) {
		return fmt.Errorf("answered %+v, rows are %+v", l, want)
	}
	return nil
}

func fenceNodeEffect(_ fuzzStore, data []byte, resp wire.Message, before, after state) error {
	req, err := decode[wire.NodeRef](data)
	if err != nil {
		return err
	}
	b, a := before.world(), after.world()
	fenced := map[string]uint64{}
	for _, f := range resp.(*wire.FencedList).Items {
		if _, ok := b.vols[f.VolumeID]; !ok {
			return fmt.Errorf("reported fencing unknown volume %s", f.VolumeID)
		}
		fenced[f.VolumeID] = f.Epoch
	}
	for id, bv := range b.vols {
		av := a.vols[id]
		e, reported := fenced[id]
		if wasLive := bv.rows[req.Node].Live(); wasLive != reported {
			return fmt.Errorf("volume %s: node live before %v, reported fenced %v", id, wasLive, reported)
		}
		if !reported {
			if !reflect.DeepEqual(av, bv) {
				return fmt.Errorf("volume %s changed without being reported fenced", id)
			}
			continue
		}
		if row := av.rows[req.Node]; row.State != StateFenced || row.Epoch != e || e != bv.epoch+1 || av.epoch != e || av.vol != bv.vol {
			return fmt.Errorf("volume %s: reported fenced at %d, row now %+v, epoch %d -> %d", id, e, row, bv.epoch, av.epoch)
		}
		for n, r := range bv.rows {
			if n != req.Node && av.rows[n] != r {
				return fmt.Errorf("node %s's row on %s changed", n, id)
			}
		}
	}
	if len(a.vols) != len(b.vols) || !reflect.DeepEqual(a.leaving, b.leaving) || !reflect.DeepEqual(a.data, b.data) || before.activity != after.activity {
		return fmt.Errorf("FenceNode changed more than attachment rows")
	}
	return nil
}

func leaveEffect(_ fuzzStore, data []byte, resp wire.Message, before, after state) error {
	req, err := decode[wire.LeaveRequest](data)
	if err != nil {
		return err
	}
	d := time.Duration(req.DurationNanos)
	until := fuzzClock.Add(min(d, MaxLeave))
	b, a := before.world(), after.world()
	if d <= 0 || resp.(*wire.Int).Value != until.UnixNano() {
		return fmt.Errorf("Leave for %s accepted, answered %d; want until %s", d, resp.(*wire.Int).Value, until)
	}
	if got := a.leaving[req.Node]; !got.Until.Equal(until) || !got.Announced.Equal(fuzzClock) {
		return fmt.Errorf("recorded %+v, want until %s", got, until)
	}
	delete(a.leaving, req.Node)
	delete(b.leaving, req.Node)
	if err := onlyVolumeChanged(b, a, ""); err != nil {
		return err
	}
	return activityOnly(b, a, req.Node, func(n NodeStatus) bool { return n.LeavingUntil.Equal(until) })
}

func nodesEffect(_ fuzzStore, _ []byte, resp wire.Message, before, after state) error {
	if err := unchanged(before, after); err != nil {
		return err
	}
	l, b := resp.(*wire.NodeList), before.world()
	if l.NowUnix != fuzzClock.UnixNano() || l.StartedUnix != fuzzClock.UnixNano() || len(l.Items) != len(b.nodes) {
		return fmt.Errorf("answered %+v; %d nodes known", l, len(b.nodes))
	}
	for _, it := range l.Items {
		n := b.nodes[it.Node]
		if it.LastHeartbeat != unixNano(n.LastHeartbeat) || it.LastIO != unixNano(n.LastIO) || it.LeavingUntil != unixNano(n.LeavingUntil) || int(it.LiveGrants) != n.LiveGrants {
			return fmt.Errorf("answered %+v, node is %+v", it, n)
		}
	}
	return nil
}
