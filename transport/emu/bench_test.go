package emu_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/mem"
	"github.com/occl/occl/transport/tcp"
	"github.com/occl/occl/transport/transporttest"
)

// tcpPair connects two TCP Conns over loopback.
func tcpPair(b testing.TB) (x, y transport.Conn) {
	b.Helper()
	ln, err := tcp.Listen("127.0.0.1:0", testSecret, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dialled := make(chan *net.TCPConn, 1)
	go func() {
		tc, err := tcp.Dial(ctx, ln.Addr().String(), testSecret,
			tcp.Hello{Purpose: tcp.PurposeData, Comm: 1, Epoch: 1, From: 0, To: 1, NStreams: 1})
		if err != nil {
			b.Error(err)
		}
		dialled <- tc
	}()
	a, err := ln.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	tc := <-dialled
	if tc == nil {
		b.FailNow()
	}
	x, err = tcp.NewConn([]*net.TCPConn{tc}, tcp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	y, err = tcp.NewConn([]*net.TCPConn{a.Conn}, tcp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return x, y
}

// BenchmarkStream measures a one-way stream of frames over an emulated
// link and reports the achieved payload rate against the configured one:
// GB/s is the payload rate, link% the share of what the link allows for
// this frame size (frame headers take the rest). Inner transports: mem
// (in-process ring, 4 MiB) and tcp (loopback); "raw" is the inner
// transport unwrapped, for reference.
func BenchmarkStream(b *testing.B) {
	sizes := []int{64 << 10, 512 << 10, 4 << 20}
	for _, inner := range []string{"mem", "tcp"} {
		for _, gbps := range []float64{0, 1, 4, 10} {
			for _, size := range sizes {
				name := fmt.Sprintf("%s/link=%gGBps/size=%dKiB", inner, gbps, size>>10)
				if gbps == 0 {
					name = fmt.Sprintf("%s/raw/size=%dKiB", inner, size>>10)
				}
				b.Run(name, func(b *testing.B) {
					newPair := func(tb testing.TB) (transport.Conn, transport.Conn) {
						var x, y transport.Conn
						if inner == "mem" {
							x, y = mem.Pipe(4 << 20)
						} else {
							x, y = tcpPair(tb)
						}
						if gbps == 0 {
							return x, y
						}
						f := localFabric(tb, fmt.Sprintf("hosts=2x1,eps=%gGB/s,eps_lat=5us", gbps))
						a, err := f.Wrap(x, 0, 1)
						if err != nil {
							tb.Fatal(err)
						}
						c, err := f.Wrap(y, 1, 0)
						if err != nil {
							tb.Fatal(err)
						}
						return a, c
					}
					transporttest.Bench(b, newPair, size)
					got := float64(b.N) * float64(size) / b.Elapsed().Seconds()
					b.ReportMetric(got/1e9, "GB/s")
					if gbps > 0 {
						limit := gbps * 1e9 * float64(size) / float64(size+transport.HeaderSize)
						b.ReportMetric(100*got/limit, "link%")
					}
				})
			}
		}
	}
}

// BenchmarkPingPong measures the round trip of 1-byte frames over a link
// of 20 µs latency and reports the achieved one-way latency (µs/way)
// against the configured 20 µs plus serialisation.
func BenchmarkPingPong(b *testing.B) {
	for _, inner := range []string{"mem", "tcp"} {
		b.Run(inner, func(b *testing.B) {
			var x, y transport.Conn
			if inner == "mem" {
				x, y = mem.Pipe(mem.DefaultCapacity)
			} else {
				x, y = tcpPair(b)
			}
			f := localFabric(b, "hosts=2x1,eps=10GB/s,eps_lat=20us")
			p, err := f.Wrap(x, 0, 1)
			if err != nil {
				b.Fatal(err)
			}
			q, err := f.Wrap(y, 1, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			defer q.Close()
			ctx := context.Background()
			h := hdr(1)
			done := make(chan error, 1)
			b.ResetTimer()
			go func() {
				var buf [1]byte
				for range b.N {
					if err := q.Recv(ctx, h, buf[:]); err != nil {
						done <- err
						return
					}
					if err := q.Send(ctx, h, buf[:]); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			var buf [1]byte
			for range b.N {
				if err := p.Send(ctx, h, buf[:]); err != nil {
					b.Fatal(err)
				}
				if err := p.Recv(ctx, h, buf[:]); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(2*b.N), "µs/way")
		})
	}
}
