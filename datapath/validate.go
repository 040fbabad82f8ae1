package datapath

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// validName checks a volume name: 1..MaxNameLen bytes of printable UTF-8.
func validName(name string) error {
	if err := validText("volume name", name, MaxNameLen); err != nil {
		return err
	}
	return nil
}

// validNode checks a node name: 1..MaxNodeLen bytes of printable UTF-8 without
// spaces (Kubernetes node names are DNS subdomains).
func validNode(node string) error {
	if err := validText("node", node, MaxNodeLen); err != nil {
		return err
	}
	if strings.ContainsFunc(node, unicode.IsSpace) {
		return fmt.Errorf("%w: node %q contains white space; a node name is a DNS subdomain", ErrInvalidArgument, node)
	}
	return nil
}

func validText(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty; it must be 1 to %d bytes", ErrInvalidArgument, what, max)
	case len(s) > max:
		return fmt.Errorf("%w: %s %.32q... is %d bytes; at most %d are allowed", ErrInvalidArgument, what, s, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidArgument, what, s)
	case strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }):
		return fmt.Errorf("%w: %s %q contains a control or non-printable character", ErrInvalidArgument, what, s)
	}
	return nil
}

// validID checks the shape of a volume id ("vol-" and 16 lowercase hex digits),
// so that an id can never name a path outside the data directory.
func validID(id string) error {
	if len(id) != len(idPrefix)+16 || !strings.HasPrefix(id, idPrefix) {
		return fmt.Errorf("%w: volume id %.40q is not of the form %s<16 hex digits>", ErrInvalidArgument, id, idPrefix)
	}
	for _, c := range id[len(idPrefix):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("%w: volume id %q is not of the form %s<16 hex digits>", ErrInvalidArgument, id, idPrefix)
		}
	}
	return nil
}

func validSize(size int64) error {
	if size <= 0 || size > MaxVolumeSize {
		return fmt.Errorf("%w: volume size %d bytes; allowed are 1 to %d bytes", ErrInvalidArgument, size, MaxVolumeSize)
	}
	return nil
}

// validRange checks an I/O of n bytes at off against a volume of size bytes.
func validRange(op, id string, off, n, size int64) error {
	if n < 0 || n > MaxIOSize {
		return fmt.Errorf("%w: %s volume %s: %d bytes in one request; allowed are 0 to %d", ErrInvalidArgument, op, id, n, MaxIOSize)
	}
	if off < 0 || off > size || n > size-off {
		return fmt.Errorf("%w: %s volume %s: %d bytes at offset %d reach past the volume's end (%d bytes)", ErrOutOfRange, op, id, n, off, size)
	}
	return nil
}

// ValidNode checks a node name as the server does: 1..MaxNodeLen bytes of
// printable UTF-8 without white space.
func ValidNode(node string) error { return validNode(node) }

// ValidVolumeID checks the shape of a volume id ("vol-" and 16 lowercase hex
// digits).
func ValidVolumeID(id string) error { return validID(id) }

// ValidVolume checks a new volume's name, size and access mode as
// CreateVolume does.
func ValidVolume(name string, size int64, mode AccessMode) error {
	if err := validName(name); err != nil {
		return err
	}
	if err := validSize(size); err != nil {
		return err
	}
	return mode.Validate()
}
