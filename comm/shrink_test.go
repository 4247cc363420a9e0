package comm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/transport/tcp"
)

// initTCPWith bootstraps n ranks over TCP on 127.0.0.1 in this process,
// with opts.
func initTCPWith(t *testing.T, n int, opts ...comm.Option) []*comm.Communicator {
	t.Helper()
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms := make([]*comm.Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = comm.Init(ctx, id, r, n, opts...)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return comms
}

// shrinkAll runs Shrink on the ranks in survivors concurrently and returns
// their new communicators (by old rank) and errors.
func shrinkAll(comms []*comm.Communicator, survivors, exclude []int) (map[int]*comm.Communicator, map[int]error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	out, errs := map[int]*comm.Communicator{}, map[int]error{}
	var wg sync.WaitGroup
	for _, r := range survivors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := comms[r].Shrink(ctx, exclude)
			mu.Lock()
			out[r], errs[r] = nc, err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out, errs
}

// checkShrunk checks the new communicators of the survivors (old ranks,
// ascending) of the communicator old: sizes, ranks in old-rank order, one
// more shrink, an identity of their own, and an AllReduce of the old ranks
// whose result is computed here.
func checkShrunk(t *testing.T, old uint64, ncs map[int]*comm.Communicator, errs map[int]error, survivors []int) {
	t.Helper()
	for _, r := range survivors {
		if errs[r] != nil {
			t.Fatalf("old rank %d: Shrink: %v", r, errs[r])
		}
		if id := ncs[r].ID(); id == old || id != ncs[survivors[0]].ID() {
			t.Fatalf("old rank %d: new communicator id %016x (old %016x, rank %d's %016x)", r, id, old, survivors[0], ncs[survivors[0]].ID())
		}
	}
	var wg sync.WaitGroup
	results := make([]error, len(survivors))
	for i, r := range survivors {
		nc := ncs[r]
		if nc.Size() != len(survivors) || nc.Rank() != i || nc.Shrinks() != 1 {
			t.Fatalf("old rank %d: new rank %d of %d after %d shrinks, want %d of %d after 1", r, nc.Rank(), nc.Size(), nc.Shrinks(), i, len(survivors))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			x := []int64{int64(r), 1}
			if err := comm.AllReduce(ctx, nc, x, x, comm.Sum); err != nil {
				results[i] = err
				return
			}
			var want int64
			for _, s := range survivors {
				want += int64(s)
			}
			if x[0] != want || x[1] != int64(len(survivors)) {
				results[i] = fmt.Errorf("AllReduce gave %v, want [%d %d]", x, want, len(survivors))
			}
		}()
	}
	wg.Wait()
	for i, err := range results {
		if err != nil {
			t.Fatalf("old rank %d: %v", survivors[i], err)
		}
	}
}

// shrinkGroups makes the communicators the in-process tests shrink: over
// TCP, and in-process.
var shrinkGroups = []struct {
	name string
	make func(t *testing.T, n int) []*comm.Communicator
}{
	{"tcp", func(t *testing.T, n int) []*comm.Communicator {
		return initTCPWith(t, n, comm.WithTransport(comm.TransportTCP), comm.WithHeartbeat(100*time.Millisecond, time.Second))
	}},
	{"local", func(t *testing.T, n int) []*comm.Communicator {
		cs, err := comm.NewLocal(n)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}},
}

// A rank aborts (its listener closes, as if it died); the others find its
// operations fail, shrink without it, and reduce over the new
// communicator.
func TestShrinkAfterAbort(t *testing.T) {
	for _, g := range shrinkGroups {
		t.Run(g.name, func(t *testing.T) { testShrinkAfterAbort(t, g.make(t, 4)) })
	}
}

func testShrinkAfterAbort(t *testing.T, comms []*comm.Communicator) {
	comms[2].Abort()
	survivors := []int{0, 1, 3}
	for _, r := range survivors {
		x := []float32{1}
		if err := comm.AllReduce(context.Background(), comms[r], x, x, comm.Sum); err == nil {
			t.Fatalf("rank %d: AllReduce with an aborted rank succeeded", r)
		}
	}
	start := time.Now()
	ncs, errs := shrinkAll(comms, survivors, nil)
	defer closeMap(ncs)
	t.Logf("shrink took %v", time.Since(start))
	checkShrunk(t, comms[0].ID(), ncs, errs, survivors)
}

// A healthy communicator drops rank 1 on purpose; rank 1 calls nothing and
// finds its communicator failed.
func TestShrinkExclude(t *testing.T) {
	for _, g := range shrinkGroups {
		t.Run(g.name, func(t *testing.T) { testShrinkExclude(t, g.make(t, 4)) })
	}
}

func testShrinkExclude(t *testing.T, comms []*comm.Communicator) {
	defer comms[1].Close()
	survivors := []int{0, 2, 3}
	ncs, errs := shrinkAll(comms, survivors, []int{1})
	defer closeMap(ncs)
	checkShrunk(t, comms[0].ID(), ncs, errs, survivors)
	if err := comms[1].Barrier(context.Background()); !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("excluded rank's Barrier: %v, want ErrAborted", err)
	}
	// The old communicators are closed.
	if err := comms[0].Barrier(context.Background()); !errors.Is(err, comm.ErrAborted) && !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("Barrier on a shrunk communicator: %v", err)
	}
}

func TestShrinkArguments(t *testing.T) {
	local, err := comm.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(local)
	for _, ex := range [][]int{{0}, {2}, {-1}} {
		if _, err := local[0].Shrink(context.Background(), ex); !errors.Is(err, comm.ErrInvalidArgument) {
			t.Fatalf("Shrink(%v): %v", ex, err)
		}
	}
	if local[0].Err() != nil {
		t.Fatalf("a refused Shrink failed the communicator: %v", local[0].Err())
	}
	// Closed, or shrunk already: refused.
	local[1].Close()
	if _, err := local[1].Shrink(context.Background(), nil); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("Shrink of a closed communicator: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	alone, err := local[0].Shrink(ctx, nil)
	if err != nil || alone.Size() != 1 {
		t.Fatalf("Shrink of the last rank alive: %v", err)
	}
	defer alone.Close()
	if _, err := local[0].Shrink(ctx, nil); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("second Shrink: %v", err)
	}
}

// closeMap closes communicators concurrently, as their ranks would.
func closeMap(m map[int]*comm.Communicator) {
	var cs []*comm.Communicator
	for _, c := range m {
		cs = append(cs, c)
	}
	closeAll(cs)
}

// A rank that is alive but calls Shrink late (it was busy elsewhere) is
// waited for, not excluded.
func TestShrinkWaitsForLateRank(t *testing.T) {
	for _, g := range shrinkGroups {
		t.Run(g.name, func(t *testing.T) {
			comms := g.make(t, 4)
			comms[3].Abort()
			late := make(chan struct{})
			var ncs map[int]*comm.Communicator
			var errs map[int]error
			go func() {
				defer close(late)
				ncs, errs = shrinkAll(comms, []int{0, 1}, nil)
			}()
			// Rank 2 is still busy while the others agree (five heartbeat
			// timeouts of the TCP communicators).
			time.Sleep(500 * time.Millisecond)
			select {
			case <-late:
				t.Fatalf("ranks 0 and 1 shrank without rank 2: %v", errs)
			default:
			}
			nc2, err := comms[2].Shrink(context.Background(), nil)
			<-late
			ncs[2], errs[2] = nc2, err
			defer closeMap(ncs)
			checkShrunk(t, comms[0].ID(), ncs, errs, []int{0, 1, 2})
		})
	}
}

// A failed communicator's data listener keeps answering recovery
// connections, which Shrink's agreement needs, until the communicator is
// closed; data connections of that communicator are refused from then on
// like any other.
func TestFailedListenerServesRecovery(t *testing.T) {
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms := make([]*comm.Communicator, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = comm.Init(ctx, id, r, 2, comm.WithTransport(comm.TransportTCP))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	addr := comm.DataListenAddr(comms[0])
	comms[1].Abort()
	if err := comms[0].Barrier(ctx); !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("Barrier after the peer aborted: %v", err)
	}
	hello := tcp.Hello{Purpose: tcp.PurposeRecovery, Comm: comms[0].ID(), From: 1, To: 0, NStreams: 1}
	for _, h := range []tcp.Hello{hello, {Purpose: tcp.PurposeRecovery, Comm: comms[0].ID() + 1, From: 1, To: 0, NStreams: 1}} {
		conn, err := tcp.DialOnce(ctx, addr, id.Secret[:], h)
		if h.Comm == hello.Comm && err != nil {
			t.Fatalf("recovery dial to a failed communicator: %v", err)
		}
		if h.Comm != hello.Comm && !errors.Is(err, tcp.ErrRejected) {
			t.Fatalf("recovery dial for another communicator: %v", err)
		}
		if conn != nil {
			conn.Close()
		}
	}
	comms[0].Close()
	if _, err := tcp.DialOnce(ctx, addr, id.Secret[:], hello); err == nil {
		t.Fatal("recovery dial to a closed communicator succeeded")
	}
}

// A communicator made by Split shrinks like any other, and its parent is
// not affected.
func TestShrinkSplitChild(t *testing.T) {
	for _, g := range shrinkGroups {
		t.Run(g.name, func(t *testing.T) {
			parent := g.make(t, 6)
			defer closeAll(parent)
			children := make([]*comm.Communicator, 6)
			errs := make([]error, 6)
			var wg sync.WaitGroup
			for r := range parent {
				wg.Add(1)
				go func() {
					defer wg.Done()
					children[r], errs[r] = parent[r].Split(context.Background(), r%2, r)
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: Split: %v", r, err)
				}
			}
			// Even ranks: child ranks 0, 1, 2. Parent rank 4 (child rank
			// 2) aborts its child; parent ranks 0 and 2 shrink it.
			children[4].Abort()
			ncs, serrs := shrinkAll(children, []int{0, 2}, nil)
			defer closeMap(ncs)
			checkShrunk(t, children[0].ID(), ncs, serrs, []int{0, 2})
			var odd []*comm.Communicator
			for _, r := range []int{1, 3, 5} {
				odd = append(odd, children[r])
			}
			closeAll(odd)
			for r := range parent {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = parent[r].Barrier(context.Background())
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("parent rank %d after its child shrank: %v", r, err)
				}
			}
		})
	}
}
