package tcp

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// TestConnectDuplicateStream: a broken peer that dials the same stream of
// a pair twice must not make Connect count the duplicate as the missing
// stream: Connect either waits for the real one or fails, and never
// returns success without a Conn to that peer (which callers would
// dereference as nil).
func TestConnectDuplicateStream(t *testing.T) {
	const comm = 0xd0b1e
	ln, ctx := testListener(t)
	h := Hello{Purpose: PurposeData, Comm: comm, Epoch: 1, From: 0, To: 1, Stream: 0, NStreams: 2}
	for range 2 {
		c, err := Dial(ctx, ln.Addr().String(), testSecret, h)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	// Let both duplicates reach the listener's queue before Connect runs.
	time.Sleep(100 * time.Millisecond)
	dialled, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(dialled)
		h := h
		h.Stream = 1
		if c, err := Dial(ctx, ln.Addr().String(), testSecret, h); err == nil {
			defer c.Close()
			<-stop
		}
	}()
	defer func() { close(stop); <-dialled }()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conns, err := Connect(cctx, MeshConfig{Self: 1, Comm: comm, Epoch: 1, Secret: testSecret, Streams: 2, Listener: ln},
		[]Endpoint{{Rank: 0}, {Rank: 1}})
	for _, c := range conns {
		defer c.Close()
	}
	if err == nil && conns[0] == nil {
		t.Fatalf("Connect succeeded without a connection to rank 0: %v", conns)
	}
	if err != nil {
		t.Fatalf("Connect: %v (the real stream 1 did arrive)", err)
	}
}

// TestAcceptForAfterCloseDoesNotStash: a connection AcceptFor sets aside
// while the listener closes must be closed, not stashed in a listener that
// will never hand it out or close it (a leaked socket, and a dialler that
// waits on it forever).
func TestAcceptForAfterCloseDoesNotStash(t *testing.T) {
	ln, ctx := testListener(t)
	c, err := Dial(ctx, ln.Addr().String(), testSecret, Hello{Purpose: PurposeRecovery, Comm: 7, From: 0, To: 1, NStreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keep := func(Hello) bool {
		ln.Close() // the listener closes while AcceptFor holds the connection
		return true
	}
	if a, err := ln.AcceptFor(ctx, func(Hello) bool { return false }, keep); err == nil {
		a.Conn.Close()
		t.Fatal("AcceptFor returned a connection it did not want")
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the set-aside connection is still open after Close: read %d bytes, %v", n, err)
	}
}
