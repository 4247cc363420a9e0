package ocspb

import (
	"errors"
	"fmt"
)

// Limits enforced by the Validate methods.
const (
	// MaxRequestIDLen is the longest request id, in bytes.
	MaxRequestIDLen = 128
	// MaxConnects is the largest number of cross-connects in one target.
	MaxConnects = 1 << 16
)

// ValidateRequestID reports whether id is a usable request id: 1 to
// MaxRequestIDLen bytes of printable ASCII (no spaces or control characters).
func ValidateRequestID(id string) error {
	if id == "" {
		return errors.New("request_id is required")
	}
	if len(id) > MaxRequestIDLen {
		return fmt.Errorf("request_id is %d bytes, longer than %d", len(id), MaxRequestIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("request_id has a byte 0x%02x at offset %d; only printable ASCII without spaces is allowed", c, i)
		}
	}
	return nil
}

// Validate checks what can be checked without knowing the switch: the
// request id, the number of cross-connects, that no cross-connect joins a port
// to itself and that no port is used twice. Port ranges, failed and drained
// ports are checked by the server.
func (r *ApplyRequest) Validate() error {
	if err := ValidateRequestID(r.GetRequestId()); err != nil {
		return err
	}
	cc := r.GetConnects()
	if len(cc) > MaxConnects {
		return fmt.Errorf("%d cross-connects, more than %d", len(cc), MaxConnects)
	}
	used := make(map[uint32]int, 2*len(cc))
	for i, c := range cc {
		a, b := c.GetA(), c.GetB()
		if a == b {
			return fmt.Errorf("cross-connect %d (%d-%d) joins port %d to itself", i, a, b, a)
		}
		for _, p := range [2]uint32{a, b} {
			if j, ok := used[p]; ok {
				return fmt.Errorf("port %d is used twice: by cross-connect %d (%d-%d) and %d (%d-%d)",
					p, j, cc[j].GetA(), cc[j].GetB(), i, a, b)
			}
			used[p] = i
		}
	}
	return nil
}

// Validate accepts every GetTopologyRequest; it exists so that every request
// type goes through the validation interceptor.
func (r *GetTopologyRequest) Validate() error { return nil }

// Validate accepts every WatchRequest.
func (r *WatchRequest) Validate() error { return nil }

// Validate accepts every PortRequest: whether the port exists is checked by
// the server, which knows the switch.
func (r *PortRequest) Validate() error { return nil }
