//go:build !unix

package ocs

import "os"

// lockState does not lock on systems without flock: the caller must make
// sure that one controller owns a state file.
func lockState(path string) (*os.File, error) { return nil, nil }

// unlockState releases a lock taken by lockState.
func unlockState(f *os.File) error { return nil }
