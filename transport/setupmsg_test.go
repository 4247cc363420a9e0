package transport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/mem"
)

// TestWatch: a watched connection ends the watch with the peer's close,
// or with an error when a frame arrives on it.
func TestWatch(t *testing.T) {
	want := transport.SetupHeader(7, 1, 0x77, 3, 1, 2)
	if want.Kind != transport.KindVerify || want.Comm != 7 || want.Epoch != 1 || want.Seq != 0x77 || want.Step != 3 || want.Root != 1 || want.Count != 2 {
		t.Fatalf("SetupHeader = %+v", want)
	}
	a, b := mem.Pipe(mem.DefaultCapacity)
	done := make(chan error, 1)
	go func() { done <- transport.Watch(a, want) }()
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrPeerClosed) {
			t.Fatalf("Watch after the peer closed = %v, want ErrPeerClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not end when the peer closed")
	}

	a, b = mem.Pipe(mem.DefaultCapacity)
	go func() { done <- transport.Watch(a, want) }()
	if err := b.Send(context.Background(), want, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("Watch returned nil after a frame arrived")
	}
	a.Close()
	b.Close()
}
