//go:build !linux

package models

import (
	"syscall"
	"time"
)

// userTimeout is nil where TCP_USER_TIMEOUT does not exist: the keepalives alone then
// detect a silent peer.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
