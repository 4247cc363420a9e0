package comm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/occl/occl/internal/freeport"
)

// UniqueID identifies one communicator before it exists, like
// ncclUniqueId: the address where rank 0 serves the rendezvous and a 128-bit
// random secret that every rank must present. Create it once (usually on
// rank 0), pass its String form to the other processes, and give it to Init
// on every rank.
type UniqueID struct {
	Addr   string   // host:port of the rendezvous served by rank 0
	Secret [16]byte // shared secret; a process without it is refused
}

const idPrefix = "occl1:"

// Authenticated reports whether the id carries a secret. An id whose secret
// is zero runs with authentication off: the handshakes still run, with a
// key anyone knows, so any process that reaches the listeners can join or
// connect; rank 0 logs a warning once when such a communicator is created.
func (id UniqueID) Authenticated() bool { return id.Secret != [16]byte{} }

// NewUniqueID returns an id with a fresh secret and a free port on this
// host's address. The address is OCCL_SOCKET_ADDR if set, else the
// address of the interface OCCL_SOCKET_IFNAME selects (see InterfaceAddr),
// else the first non-loopback IPv4 address, else 127.0.0.1.
func NewUniqueID() (UniqueID, error) {
	host, err := defaultHost()
	if err != nil {
		return UniqueID{}, err
	}
	return NewUniqueIDAt(net.JoinHostPort(host, "0"))
}

// NewUniqueIDAt returns an id with a fresh secret for the rendezvous address
// addr. Port 0 picks a port that is free now (rank 0 binds it in Init or
// Grow), below the kernel's ephemeral range where the host has one, so that
// no connection or port-0 listener the kernel sets up before that bind can
// take it.
func NewUniqueIDAt(addr string) (UniqueID, error) {
	var id UniqueID
	if _, err := rand.Read(id.Secret[:]); err != nil {
		return id, fmt.Errorf("occl: unique id: %w", err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return id, fmt.Errorf("occl: unique id: bad address %q: %w", addr, err)
	}
	if port == "0" {
		p, err := freeport.On(host)
		if err != nil {
			return id, fmt.Errorf("occl: unique id: %w", err)
		}
		addr = net.JoinHostPort(host, strconv.Itoa(p))
	}
	id.Addr = addr
	return id, nil
}

// String encodes the id as "occl1:HOST:PORT/SECRET" (secret in hex), the
// form ParseUniqueID reads and OCCL_UNIQUE_ID holds.
func (id UniqueID) String() string {
	return idPrefix + id.Addr + "/" + hex.EncodeToString(id.Secret[:])
}

// ParseUniqueID decodes the String form of an id.
func ParseUniqueID(s string) (UniqueID, error) {
	var id UniqueID
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), idPrefix)
	if !ok {
		return id, fmt.Errorf("occl: unique id %q: missing %q prefix", s, idPrefix)
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return id, fmt.Errorf("occl: unique id %q: missing secret", s)
	}
	if _, _, err := net.SplitHostPort(rest[:i]); err != nil {
		return id, fmt.Errorf("occl: unique id %q: %w", s, err)
	}
	sec, err := hex.DecodeString(rest[i+1:])
	if err != nil || len(sec) != len(id.Secret) {
		return id, fmt.Errorf("occl: unique id %q: secret must be %d hex digits", s, 2*len(id.Secret))
	}
	id.Addr = rest[:i]
	copy(id.Secret[:], sec)
	return id, nil
}

// defaultHost picks the address this host is reached at.
func defaultHost() (string, error) {
	if a := os.Getenv("OCCL_SOCKET_ADDR"); a != "" {
		return a, nil
	}
	if spec := os.Getenv("OCCL_SOCKET_IFNAME"); spec != "" {
		return InterfaceAddr(spec)
	}
	ifs, _ := net.Interfaces()
	for i := range ifs {
		ifi := &ifs[i]
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		if ip := ipv4Of(ifi); ip != "" {
			return ip, nil
		}
	}
	return "127.0.0.1", nil
}

func ipv4Of(ifi *net.Interface) string {
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}
