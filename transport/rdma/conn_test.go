package rdma

import (
	"testing"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/rdma/verbs"
	"github.com/occl/occl/transport/transporttest"
)

// TestConformance runs the suite every transport passes over emulated
// verbs: RoCE (GID routing) and InfiniBand (LID routing) ports, a small
// window (large frames stream through it or go by rendezvous), and
// rendezvous turned off (everything streams through the window).
func TestConformance(t *testing.T) {
	t.Run("roce", func(t *testing.T) { transporttest.Run(t, pair) })
	if testing.Short() {
		return
	}
	t.Run("ib", func(t *testing.T) {
		transporttest.Run(t, func(t testing.TB) (a, b transport.Conn) {
			x, y := pairWith(t, pairOpts{emu: verbs.EmuConfig{LinkLayer: verbs.LinkLayerInfiniBand}})
			return x, y
		})
	})
	t.Run("small-window", func(t *testing.T) {
		transporttest.Run(t, func(t testing.TB) (a, b transport.Conn) {
			small := func(c *Config) { c.Slots, c.SlotSize = 4, 4096 }
			x, y := pairWith(t, pairOpts{a: small, b: small})
			return x, y
		})
	})
}

func BenchmarkSendRecv4KiB(b *testing.B)  { transporttest.Bench(b, pair, 4<<10) }
func BenchmarkSendRecv1MiB(b *testing.B)  { transporttest.Bench(b, pair, 1<<20) }
func BenchmarkSendRecv16MiB(b *testing.B) { transporttest.Bench(b, pair, 16<<20) }
