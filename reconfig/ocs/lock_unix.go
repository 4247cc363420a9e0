//go:build unix

package ocs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockState takes an exclusive advisory lock on path+".lock", so that two
// controllers never own the same state file. The kernel releases it when the
// process dies, even by SIGKILL.
func lockState(path string) (*os.File, error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state file %s is in use by another OCS controller", path)
		}
		return nil, fmt.Errorf("locking %s.lock: %w", path, err)
	}
	return f, nil
}

// unlockState releases a lock taken by lockState.
func unlockState(f *os.File) error {
	if f == nil {
		return nil
	}
	return f.Close() // closing the descriptor releases the flock
}
