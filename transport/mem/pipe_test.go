package mem_test

import (
	"testing"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/mem"
	"github.com/occl/occl/transport/transporttest"
)

func pair(t testing.TB) (transport.Conn, transport.Conn) {
	a, b := mem.Pipe(mem.DefaultCapacity)
	return a, b
}

func TestConformance(t *testing.T) { transporttest.Run(t, pair) }

func BenchmarkSendRecv4KiB(b *testing.B) { transporttest.Bench(b, pair, 4<<10) }
func BenchmarkSendRecv1MiB(b *testing.B) { transporttest.Bench(b, pair, 1<<20) }
