package wire

// The messages of the failure latch: FailedVolumes answers a FailedList;
// ClearFailure takes a VolumeRef and answers Empty.

// FailedVolume is one volume whose data file failed to flush.
type FailedVolume struct {
	VolumeID string
	Name     string
	// SinceUnix is when the flush failed (Unix nanoseconds, server clock).
	SinceUnix int64
	// Op is the operation whose flush failed ("flush", "close").
	Op string
	// Error is the operating system's error.
	Error string
}

// FailedList is the answer to FailedVolumes.
type FailedList struct{ Items []FailedVolume }

func (m *FailedList) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.u64(uint64(len(m.Items)))
	for _, f := range m.Items {
		e.str(f.VolumeID)
		e.str(f.Name)
		e.i64(f.SinceUnix)
		e.str(f.Op)
		e.str(f.Error)
	}
	return e.b
}

func (m *FailedList) Unmarshal(b []byte) error {
	d := decoder{b: b}
	n := d.count("items")
	m.Items = make([]FailedVolume, n)
	for i := 0; i < n && d.err == nil; i++ {
		f := &m.Items[i]
		f.VolumeID = d.str("volume_id")
		f.Name = d.str("name")
		f.SinceUnix = d.i64("since")
		f.Op = d.str("op")
		f.Error = d.str("error")
	}
	return d.finish("FailedList")
}
