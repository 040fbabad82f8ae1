package datapath

import (
	"fmt"
	"slices"
)

// ServerSpace is one recorded server of the control group as placement sees
// it: its id and the capacity it has free, in bytes (Free < 0: it did not
// say, so it takes no replica).
type ServerSpace struct {
	ID   string
	Free int64
}

// PlaceReplicas chooses the r servers, all distinct, that hold the copies of
// a new volume of size bytes: the r with the most free capacity among those
// that can hold it, ties going to the one listed first. The first chosen
// (the roomiest) is the holder. Refused with ErrInvalidArgument: r outside
// 1..MaxReplicas, r above the number of recorded servers (naming both), a
// server listed twice; with ErrNoSpace: fewer than r servers with room
// (naming how many have it). A pure function: the caller asks the servers
// their free capacity (datapath/client) and commits the choice.
func PlaceReplicas(servers []ServerSpace, r int, size int64) ([]string, error) {
	if r < 1 || r > MaxReplicas {
		return nil, fmt.Errorf("%w: %d replicas asked; 1 to %d are allowed", ErrInvalidArgument, r, MaxReplicas)
	}
	if r > len(servers) {
		return nil, fmt.Errorf("%w: %d replicas asked, but the control group records %d servers; each replica needs a server of its own", ErrInvalidArgument, r, len(servers))
	}
	for i, s := range servers {
		if slices.ContainsFunc(servers[:i], func(o ServerSpace) bool { return o.ID == s.ID }) {
			return nil, fmt.Errorf("%w: server %s is listed twice for placement", ErrInvalidArgument, s.ID)
		}
	}
	fit := make([]ServerSpace, 0, len(servers))
	for _, s := range servers {
		if s.Free >= 0 && s.Free >= size {
			fit = append(fit, s)
		}
	}
	if len(fit) < r {
		return nil, fmt.Errorf("%w: %d replicas of %d bytes asked, but only %d of the %d servers have that much free", ErrNoSpace, r, size, len(fit), len(servers))
	}
	slices.SortStableFunc(fit, func(a, b ServerSpace) int {
		switch {
		case a.Free > b.Free:
			return -1
		case a.Free < b.Free:
			return 1
		}
		return 0
	})
	out := make([]string, r)
	for i := range out {
		out[i] = fit[i].ID
	}
	return out, nil
}
