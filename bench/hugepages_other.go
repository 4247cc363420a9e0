//go:build !linux

package bench

import "fmt"

// hugeBuffer fails: transparent huge pages are asked for on Linux only.
func hugeBuffer(n int) ([]byte, func() error, error) {
	return nil, nil, fmt.Errorf("bench: huge-page buffers need Linux")
}
