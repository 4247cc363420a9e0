package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// Purpose says what a connection is for; a listener accepts only the
// purposes it serves.
type Purpose uint8

// Connection purposes.
const (
	// PurposeRendezvous connects a rank to the bootstrap root.
	PurposeRendezvous Purpose = 1
	// PurposeData connects two ranks of a communicator.
	PurposeData Purpose = 2
	// PurposeRecovery connects two ranks of a failed communicator that
	// agree on who survives it (or checks that a rank is still alive). It
	// goes to the data listener, which keeps serving until the
	// communicator is closed.
	PurposeRecovery Purpose = 3
	// PurposeProbe checks that a rank is alive: the listener completes the
	// handshake, then closes the connection instead of handing it out.
	PurposeProbe Purpose = 4
)

// Hello is what a connecting rank says about itself. It is authenticated
// with the communicator's secret before the connection is used.
type Hello struct {
	Purpose  Purpose
	Comm     uint64 // communicator id
	Epoch    uint32 // topology epoch the connection belongs to
	From     int    // rank of the dialling side
	To       int    // rank expected on the listening side
	Stream   int    // index of this socket among the pair's streams
	NStreams int    // number of sockets the pair uses
}

// ErrAuth is returned when the two sides of a handshake do not share the
// communicator's secret.
var ErrAuth = errors.New("authentication failed: the peer does not hold this communicator's secret")

// ErrRejected is returned to a dialler whose hello the listener refused
// (wrong communicator, purpose or rank).
var ErrRejected = errors.New("connection rejected by listener")

const (
	helloMagic = "OCCLHS01"
	helloSize  = 8 + 1 + 8 + 4 + 4 + 4 + 2 + 2 + 16 // magic purpose comm epoch from to stream nstreams nonce
	nonceSize  = 16
	macSize    = sha256.Size

	statusOK       = 0
	statusAuth     = 1
	statusRejected = 2
)

func (h *Hello) encode(b []byte, nonce []byte) {
	copy(b, helloMagic)
	b[8] = byte(h.Purpose)
	binary.LittleEndian.PutUint64(b[9:], h.Comm)
	binary.LittleEndian.PutUint32(b[17:], h.Epoch)
	binary.LittleEndian.PutUint32(b[21:], uint32(h.From))
	binary.LittleEndian.PutUint32(b[25:], uint32(h.To))
	binary.LittleEndian.PutUint16(b[29:], uint16(h.Stream))
	binary.LittleEndian.PutUint16(b[31:], uint16(h.NStreams))
	copy(b[33:], nonce)
}

func decodeHello(b []byte) (Hello, error) {
	var h Hello
	if len(b) < helloSize || string(b[:8]) != helloMagic {
		return h, errors.New("not an occl handshake")
	}
	h.Purpose = Purpose(b[8])
	h.Comm = binary.LittleEndian.Uint64(b[9:])
	h.Epoch = binary.LittleEndian.Uint32(b[17:])
	h.From = int(int32(binary.LittleEndian.Uint32(b[21:])))
	h.To = int(int32(binary.LittleEndian.Uint32(b[25:])))
	h.Stream = int(binary.LittleEndian.Uint16(b[29:]))
	h.NStreams = int(binary.LittleEndian.Uint16(b[31:]))
	if h.Purpose < PurposeRendezvous || h.Purpose > PurposeProbe {
		return h, fmt.Errorf("unknown purpose %d", h.Purpose)
	}
	if h.From < 0 || h.To < 0 || h.NStreams < 1 || h.Stream >= h.NStreams {
		return h, fmt.Errorf("invalid hello: from %d to %d stream %d/%d", h.From, h.To, h.Stream, h.NStreams)
	}
	return h, nil
}

func mac(secret []byte, label string, hello, nonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(hello)
	m.Write(nonce)
	return m.Sum(nil)
}

// clientHandshake authenticates conn as the dialling side. Both sides prove
// they hold secret without sending it: the listener answers the hello with a
// nonce and an HMAC over hello and nonce; the dialler checks it and answers
// with its own HMAC; the listener replies with a status byte.
func clientHandshake(conn net.Conn, secret []byte, h Hello) error {
	var hello [helloSize]byte
	nonce := hello[helloSize-nonceSize:]
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	h.encode(hello[:], nonce)
	if _, err := conn.Write(hello[:]); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	var reply [nonceSize + macSize]byte
	if _, err := io.ReadFull(conn, reply[:]); err != nil {
		return fmt.Errorf("read challenge: %w (the listener may have refused the hello)", err)
	}
	snonce := reply[:nonceSize]
	if !hmac.Equal(reply[nonceSize:], mac(secret, "occl-listener", hello[:], snonce)) {
		return ErrAuth
	}
	if _, err := conn.Write(mac(secret, "occl-dialler", hello[:], snonce)); err != nil {
		return fmt.Errorf("send response: %w", err)
	}
	var status [1]byte
	if _, err := io.ReadFull(conn, status[:]); err != nil {
		return fmt.Errorf("read status: %w", err)
	}
	switch status[0] {
	case statusOK:
		return nil
	case statusAuth:
		return ErrAuth
	default:
		return ErrRejected
	}
}

// serverHandshake authenticates conn as the listening side and returns the
// dialler's hello. accept decides whether the hello is one this listener
// serves; a refused hello gets statusRejected.
func serverHandshake(conn net.Conn, secret []byte, accept func(Hello) error) (Hello, error) {
	var hello [helloSize]byte
	if _, err := io.ReadFull(conn, hello[:]); err != nil {
		return Hello{}, fmt.Errorf("read hello: %w", err)
	}
	h, err := decodeHello(hello[:])
	if err != nil {
		return h, err
	}
	var reply [nonceSize + macSize]byte
	snonce := reply[:nonceSize]
	if _, err := rand.Read(snonce); err != nil {
		return h, err
	}
	copy(reply[nonceSize:], mac(secret, "occl-listener", hello[:], snonce))
	if _, err := conn.Write(reply[:]); err != nil {
		return h, fmt.Errorf("send challenge: %w", err)
	}
	var resp [macSize]byte
	if _, err := io.ReadFull(conn, resp[:]); err != nil {
		return h, fmt.Errorf("read response from rank %d: %w (wrong secret?)", h.From, err)
	}
	if !hmac.Equal(resp[:], mac(secret, "occl-dialler", hello[:], snonce)) {
		conn.Write([]byte{statusAuth})
		return h, fmt.Errorf("rank %d: %w", h.From, ErrAuth)
	}
	if err := accept(h); err != nil {
		conn.Write([]byte{statusRejected})
		return h, fmt.Errorf("rank %d: %w: %v", h.From, ErrRejected, err)
	}
	if _, err := conn.Write([]byte{statusOK}); err != nil {
		return h, fmt.Errorf("send status: %w", err)
	}
	return h, nil
}
