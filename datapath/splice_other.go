//go:build !linux

package datapath

import (
	"errors"
	"syscall"
)

const stagePipeSize = 0

var errStageFull = errors.New("splice pipe full")

// stage is unavailable here: every bulk payload is read into a buffer.
type stage struct{ size int }

func newStage() (*stage, error) { return nil, errors.New("splice: not supported on this system") }

func (st *stage) close()                                 {}
func (st *stage) fill(syscall.RawConn, int) (int, error) { return 0, errStageFull }
func (st *stage) drainTo(File, int64, int) error         { return errors.New("splice: not supported") }
func (st *stage) readOut([]byte) (int, error)            { return 0, errors.New("splice: not supported") }
func (st *stage) discard()                               {}
