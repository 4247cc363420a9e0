//go:build !linux

package hugemem

import "errors"

// allocate fails: transparent huge pages are asked for on Linux only.
func allocate(n int) (b, mapping []byte, fd int, err error) {
	return nil, nil, -1, errors.New("huge-page buffers need Linux")
}

// release is never reached without allocate.
func release(mapping []byte, fd int) error { return nil }
