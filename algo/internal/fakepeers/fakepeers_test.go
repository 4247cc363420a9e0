package fakepeers

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDelivery(t *testing.T) {
	for _, opts := range []Options{{EagerLimit: -1}, {EagerLimit: 0}, {EagerLimit: 1 << 20}, {MaxDelay: time.Millisecond, DelayProb: 0.5}} {
		err := Run(context.Background(), 3, opts, func(ctx context.Context, rank int, p Peers) error {
			if rank == 0 {
				for k := 0; k < 50; k++ {
					if err := p.Send(ctx, 1, uint32(k), bytes.Repeat([]byte{byte(k)}, k)); err != nil {
						return err
					}
				}
				return nil
			}
			if rank == 1 {
				for k := 0; k < 50; k++ {
					buf := make([]byte, k)
					if err := p.Recv(ctx, 0, uint32(k), buf); err != nil {
						return err
					}
					if !bytes.Equal(buf, bytes.Repeat([]byte{byte(k)}, k)) {
						return errors.New("wrong payload")
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
	}
}

func TestMismatch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		step      uint32
		n         int
		wantError string
	}{
		{"step", 2, 8, "got step 1"},
		{"length", 1, 9, "got 8 bytes, want 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), 2, Options{EagerLimit: -1}, func(ctx context.Context, rank int, p Peers) error {
				if rank == 0 {
					return p.Send(ctx, 1, 1, make([]byte, 8))
				}
				return p.Recv(ctx, 0, tc.step, make([]byte, tc.n))
			})
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Fatalf("got %v, want an error containing %q", err, tc.wantError)
			}
		})
	}
}

// TestRendezvousDeadlock checks that two ranks that both send a large
// message before receiving deadlock, as they would over TCP, and that the
// timeout reports where they are stuck.
func TestRendezvousDeadlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := Run(ctx, 2, Options{EagerLimit: 64}, func(ctx context.Context, rank int, p Peers) error {
		other := 1 - rank
		if err := p.Send(ctx, other, 0, make([]byte, 65)); err != nil {
			return err
		}
		return p.Recv(ctx, other, 0, make([]byte, 65))
	})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	// The rank that failed first says where it waited; the other may have
	// returned by the time it is asked, and then is not listed as blocked.
	if !regexp.MustCompile(`failed first: fakepeers: rank [01]: send step 0 (\(65 bytes\) )?to rank [01]`).MatchString(err.Error()) {
		t.Fatalf("error does not say where the rank that failed first was blocked: %v", err)
	}

	// The same exchange with eager messages completes.
	err = Run(context.Background(), 2, Options{EagerLimit: 64}, func(ctx context.Context, rank int, p Peers) error {
		other := 1 - rank
		if err := p.Send(ctx, other, 0, make([]byte, 64)); err != nil {
			return err
		}
		return p.Recv(ctx, other, 0, make([]byte, 64))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestUndelivered(t *testing.T) {
	err := Run(context.Background(), 2, Options{}, func(ctx context.Context, rank int, p Peers) error {
		if rank == 0 {
			return p.Send(ctx, 1, 3, nil)
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "undelivered") {
		t.Fatalf("got %v, want an undelivered-message error", err)
	}
}

func TestBadPeer(t *testing.T) {
	nw := New(2, Options{})
	ctx := context.Background()
	if err := nw.Peer(0).Send(ctx, 0, 0, nil); err == nil {
		t.Error("send to self succeeded")
	}
	if err := nw.Peer(0).Recv(ctx, 2, 0, nil); err == nil {
		t.Error("recv from rank out of range succeeded")
	}
}

func TestHideEager(t *testing.T) {
	type eager interface{ EagerLimit(int) int }
	if _, ok := New(2, Options{}).Peers()[0].(eager); !ok {
		t.Error("peers do not implement EagerLimit")
	}
	if _, ok := New(2, Options{HideEager: true}).Peers()[0].(eager); ok {
		t.Error("HideEager peers implement EagerLimit")
	}
}

func TestAbandonedRendezvous(t *testing.T) {
	nw := New(2, Options{EagerLimit: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	buf := make([]byte, 100)
	if err := nw.Peer(0).Send(ctx, 1, 0, buf); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send to a rank that never receives: %v", err)
	}
	// The sender may reuse buf now; the receiver must not read it.
	if err := nw.Peer(1).Recv(context.Background(), 0, 0, make([]byte, 100)); err == nil {
		t.Fatal("received a message its sender gave up on")
	}
}

// drawAll returns the first k delays of every link's send and receive
// streams.
func drawAll(nw *Network, k int) []time.Duration {
	var out []time.Duration
	for i, l := range nw.links {
		p := nw.peers[i/nw.n]
		for range k {
			out = append(out, p.draw(l.sendRand), p.draw(l.recvRand))
		}
	}
	return out
}

func TestSeedRepeatsDelays(t *testing.T) {
	opts := Options{MaxDelay: time.Millisecond, DelayProb: 0.5, Seed: 42}
	a, b := drawAll(New(3, opts), 50), drawAll(New(3, opts), 50)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave different delays")
	}
	nonzero := 0
	for _, d := range a {
		if d < 0 || d >= opts.MaxDelay {
			t.Fatalf("delay %v outside [0, %v)", d, opts.MaxDelay)
		}
		if d > 0 {
			nonzero++
		}
	}
	if nonzero < len(a)/4 || nonzero > 3*len(a)/4 {
		t.Errorf("%d of %d delays nonzero with probability 0.5", nonzero, len(a))
	}
	opts.Seed = 43
	if slices.Equal(a, drawAll(New(3, opts), 50)) {
		t.Error("different seeds gave the same delays")
	}
}

func TestSeedFromEnv(t *testing.T) {
	t.Setenv(SeedEnv, "12345")
	if s := New(2, Options{}).Seed(); s != 12345 {
		t.Errorf("seed %d, want %s's 12345", s, SeedEnv)
	}
	if s := New(2, Options{Seed: 7}).Seed(); s != 7 {
		t.Errorf("seed %d, want the option's 7", s)
	}
	t.Setenv(SeedEnv, "")
	if New(2, Options{}).Seed() == 0 {
		t.Error("no seed chosen")
	}
}

func TestFailureNamesSeed(t *testing.T) {
	err := Run(context.Background(), 2, Options{Seed: 1234, MaxDelay: time.Microsecond}, func(ctx context.Context, rank int, p Peers) error {
		if rank == 1 {
			return errors.New("boom")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "seed 1234") || !strings.Contains(err.Error(), SeedEnv+"=1234") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("error %v does not name the seed and the failure", err)
	}
}
