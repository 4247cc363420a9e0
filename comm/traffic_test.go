package comm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/topo"
)

// TestTrafficMatrix counts tagged all-to-alls and checks the gathered
// matrix against the counts every rank used.
func TestTrafficMatrix(t *testing.T) {
	top, _ := topo.FromSpec("hosts=2x2")
	requireOK(t, runLocal(t, 4, func(ctx context.Context, c *comm.Communicator) error {
		r, n := c.Rank(), c.Size()
		// Two AllToAllV under "layer0/dispatch": rank r sends (r+1)*(j+1)
		// float32 to rank j; one uniform AllToAll under "layer0/combine".
		sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
		off := 0
		for j := range sc {
			sc[j], sd[j] = (r+1)*(j+1), off
			off += sc[j]
		}
		send := make([]float32, off)
		off = 0
		for j := range rc {
			rc[j], rd[j] = (j+1)*(r+1), off
			off += rc[j]
		}
		recv := make([]float32, off)
		tagged := comm.WithTrafficTag(ctx, "layer0/dispatch")
		for i := 0; i < 2; i++ {
			if err := comm.AllToAllV(tagged, c, send, sc, sd, recv, rc, rd); err != nil {
				return err
			}
		}
		x := make([]int32, 4*n)
		if err := comm.AllToAll(comm.WithTrafficTag(ctx, "layer0/combine"), c, x, x); err != nil {
			return err
		}
		row, ops := c.LocalTraffic("layer0/dispatch")
		if ops != 2 || row[3] != uint64(2*4*(r+1)*4) {
			return fmt.Errorf("local row %v after %d ops", row, ops)
		}
		m, err := c.TrafficMatrix(ctx, "layer0/dispatch")
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if want := uint64(2 * 4 * (i + 1) * (j + 1)); m.Ranks[i][j] != want {
					return fmt.Errorf("matrix[%d][%d] = %d, want %d", i, j, m.Ranks[i][j], want)
				}
			}
		}
		// Hosts: ranks 0,1 on host 0 and 2,3 on host 1.
		var h01 uint64
		for _, i := range []int{0, 1} {
			for _, j := range []int{2, 3} {
				h01 += m.Ranks[i][j]
			}
		}
		if m.Hosts[0][1] != h01 {
			return fmt.Errorf("host matrix %v, want [0][1] = %d", m.Hosts, h01)
		}
		var back comm.Traffic
		if err := json.Unmarshal(m.JSON(), &back); err != nil || back.Ranks[2][3] != m.Ranks[2][3] {
			return fmt.Errorf("JSON round trip: %v", err)
		}
		comb, err := c.TrafficMatrix(ctx, "layer0/combine")
		if err != nil || comb.Ranks[1][2] != 16 || comb.Ops[3] != 1 {
			return fmt.Errorf("combine matrix %v, %v", comb, err)
		}
		if tags := c.TrafficTags(); len(tags) != 2 {
			return fmt.Errorf("tags %v", tags)
		}
		c.ResetTraffic("layer0/dispatch")
		if _, ops := c.LocalTraffic("layer0/dispatch"); ops != 0 {
			return fmt.Errorf("reset left %d ops", ops)
		}
		// Counting goes on from zero after a reset, under the tag used
		// last and under another.
		for _, reset := range []string{"layer0/dispatch", ""} {
			c.ResetTraffic(reset)
			if err := comm.AllToAllV(tagged, c, send, sc, sd, recv, rc, rd); err != nil {
				return err
			}
			row, ops := c.LocalTraffic("layer0/dispatch")
			if ops != 1 || row[3] != uint64(4*(r+1)*4) {
				return fmt.Errorf("after reset %q: local row %v after %d ops", reset, row, ops)
			}
		}
		return nil
	}, comm.WithTopology(top)))
}

// TestTrafficMatrixInIssueOrder: TrafficMatrix runs after the all-to-alls
// issued before it, so its counts include Async ones nobody waited for yet;
// LocalTraffic may read the counters while all-to-alls are being counted.
func TestTrafficMatrixInIssueOrder(t *testing.T) {
	requireOK(t, runLocal(t, 2, func(ctx context.Context, c *comm.Communicator) error {
		tagged := comm.WithTrafficTag(ctx, "moe")
		stop := make(chan struct{})
		read := make(chan error, 1)
		go func() {
			var last uint64
			for {
				select {
				case <-stop:
					read <- nil
					return
				default:
				}
				row, ops := c.LocalTraffic("moe")
				if ops < last || row[1] != 8*ops {
					read <- fmt.Errorf("LocalTraffic: row %v after %d ops (%d before)", row, ops, last)
					return
				}
				last = ops
			}
		}()
		x := make([]float32, 4)
		for range 200 {
			if err := comm.AllToAll(tagged, c, x, x); err != nil {
				return err
			}
		}
		var reqs []*comm.Request
		for range 3 {
			reqs = append(reqs, c.AllToAllAsync(tagged, comm.Slice(x), comm.Slice(x)))
		}
		m, err := c.TrafficMatrix(ctx, "moe")
		for _, r := range reqs {
			if werr := r.Wait(ctx); werr != nil && err == nil {
				err = werr
			}
		}
		close(stop)
		if rerr := <-read; rerr != nil && err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
		for i, ops := range m.Ops {
			if ops != 203 || m.Ranks[i][1-i] != 203*8 {
				return fmt.Errorf("rank %d: %d ops, %d bytes to rank %d; want 203 and %d", i, ops, m.Ranks[i][1-i], 1-i, 203*8)
			}
		}
		return nil
	}))
}

// BenchmarkAllToAllMonitor measures a 1 MiB AllToAll on 4 in-process ranks,
// untagged and tagged (both are counted); BenchmarkTrafficRecord measures
// the counting alone, so the two show the monitor's share of an operation.
func BenchmarkAllToAllMonitor(b *testing.B) {
	for _, tagged := range []bool{false, true} {
		b.Run(fmt.Sprintf("tagged=%v", tagged), func(b *testing.B) {
			comms, _ := comm.NewLocal(4)
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			ctx := context.Background()
			if tagged {
				ctx = comm.WithTrafficTag(ctx, "bench")
			}
			b.SetBytes(1 << 20)
			b.ReportAllocs()
			done := make(chan error, 3)
			for _, c := range comms[1:] {
				go func() {
					x := make([]byte, 1<<20)
					var err error
					for i := 0; i < b.N && err == nil; i++ {
						err = c.AllToAll(ctx, comm.Raw(x, comm.Uint8), comm.Raw(x, comm.Uint8))
					}
					done <- err
				}()
			}
			x := make([]byte, 1<<20)
			for i := 0; i < b.N; i++ {
				if err := comms[0].AllToAll(ctx, comm.Raw(x, comm.Uint8), comm.Raw(x, comm.Uint8)); err != nil {
					b.Fatal(err)
				}
			}
			for range comms[1:] {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
