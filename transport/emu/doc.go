// Package emu shapes transport connections to the bandwidth and latency of
// an emulated fabric, so that processes on one machine behave like the
// ranks of a multi-host job: fast links inside a host, slower ones between
// hosts, NICs shared by the ranks of a host, optical circuits faster than
// the packet network, and circuits that change while the job runs.
//
// A Fabric holds a topo.Topology and a table of resources; Fabric.Wrap
// turns any transport.Conn (tcp, shm, mem) into one shaped like the path
// that Topology.Path gives between two ranks. Both ends of a connection
// must be wrapped. Shaping only ever slows traffic down: the inner
// transport must be faster than the links it emulates.
//
// # Model
//
// A frame of n bytes (payload plus the 56-byte frame header) from rank a to
// rank b occupies, on its path P = Path(a, b):
//
//   - the link from a to b (one resource per ordered pair), for n / P.Bandwidth;
//   - for packet-network (EPS) and circuit (OCS) paths, the transmit side of
//     the source NIC and the receive side of the destination NIC, each for
//     n divided by its own rate: a packet NIC's Bandwidth (or its class's),
//     an optical port's circuit bandwidth. NICs are full duplex, and are
//     shared by every rank of the host that uses them, in whatever process.
//
// Intra-host (HBD) paths use only their link. A pair that the topology
// gives no direct path (topo.None, across rails of a rail-only fabric) is
// carried as packet-network traffic between the two ranks' NICs and counted
// in Stats.Unrouted.
//
// Stats.Links counts the bytes that crossed each link: a host's (or HB
// domain's) HBD links, each optical circuit by its two ports, the packet
// network by the NICs of the two ranks. A test reads from them which links
// a job's traffic took, for instance that no frame crossed a port of a
// failed host after the circuits were switched around it. A Send adds to
// one counter that its Conn looked up when it resolved its path, so the
// count costs one atomic add per frame.
//
// Each resource has a next-free time, and serves frames in the order they
// are booked: a frame ready at t starts on a NIC side at max(t, next free)
// and advances the next-free time with a compare-and-swap loop (lock free,
// also across processes). The link starts once both NIC sides have started
// the frame. The frame's serialisation ends when every resource has passed
// it; it arrives one path latency (P.Latency) later. So when two ranks of a
// host send continuously through their shared NIC, their frames alternate
// on it and each gets half its bandwidth; an incast shares the receiving
// NIC the same way.
//
// A NIC side serves frames of at most PacketSize bytes (control messages,
// small collectives) ahead of larger ones, as a packet NIC interleaves the
// packets of its flows: such a frame waits for the packet-sized frames
// booked before it and for at most one packet's time of a larger frame,
// and the larger frames queued then wait its duration longer. So a 512-byte
// message does not wait for a whole bulk transfer booked before it, and
// packet-sized frames still take no more than the NIC's bandwidth.
//
// Latency is a delay, not an occupancy. Send hands the frame to the inner
// connection at once, preceded by a small timing frame carrying its
// arrival time, and returns when its serialisation has ended (like a NIC
// that has put the last byte on the wire). The receiving Conn's Recv
// returns no earlier than the arrival time. A stream of back-to-back Sends
// therefore pays the latency once and then runs at the bandwidth, while a
// ping-pong pays it on every trip. The inner transport's copy overlaps the
// emulated serialisation, so it costs nothing as long as it is faster.
//
// A Send whose frame could not end before its context's deadline fails at
// once with an error wrapping context.DeadlineExceeded, without sending
// anything; likewise a Recv whose frame would arrive after its deadline.
// Cancellation and Close end a wait within about 1.5 ms.
//
// # Catching up
//
// A Send often returns a little after the frame's emulated end: its wait
// woke late, the process was descheduled, or the inner transport was slow.
// That delay is not the link's, so the next frame on the Conn, if sent
// within 50 µs of the return, is booked as if it had been sent that much
// earlier: never more than Config.CatchUp (1 ms by default), never before
// the link is free, and never before the last Recv of the sending rank
// returned (a frame may depend on it). This keeps the throughput of streams
// at the configured bandwidth on a busy machine; real-time bursts are
// bounded by CatchUp at link speed. A lower bound measured from a Send that
// starts a burst (more than 50 µs after the previous Send on the Conn
// returned) always holds: n bytes over a link of bandwidth B take at least
// n / B.
//
// # Reconfiguration
//
// Fabric.SetTopology replaces the topology atomically, typically with the
// same hosts, ranks and NICs and other circuits. Each Conn notices the new
// version on its next Send (one atomic load per Send) and re-reads its path
// then; frames in flight finish on the old one. Each process calls
// SetTopology on its own Fabric.
//
// # Precision
//
// Times are CLOCK_MONOTONIC nanoseconds, which every process of a machine
// shares; they are read through Go's monotonic clock (vDSO, no system call)
// with an offset calibrated once to well under a microsecond. A wait
// sleeps on a Go timer while more than 1.65 ms remain (Go timers fire up
// to about 1 ms late), then in nanosleep (50 to 150 µs late), and polls the
// clock, yielding between reads, for the last Config.Spin (150 µs by
// default). A wait therefore ends a few microseconds after its target
// unless the machine is overloaded; with Spin negative it ends 50 to
// 150 µs late and uses no CPU. Bookings have nanosecond resolution.
//
// Measured with go test -bench . in this package on a 2-core VM shared
// with other jobs (load average 4 to 8), over transport/mem: streams of
// 64 KiB to 4 MiB frames reached 81 to 99 % of a 1 GB/s link, 74 to 100 %
// of 4 GB/s and, in a quieter run, 95 to 99 % of 10 GB/s (runs starved by
// the other jobs went as low as 50 %; no run ever exceeded the link);
// 1-byte ping-pongs on a 20 µs link took 20.9 µs a way. Over loopback TCP
// the inner transport itself moves only 1 to 2.3 GB/s, which bounds what
// faster links can show; 512 KiB frames reached 91 % of 1 GB/s. Every
// message costs one extra 64-byte frame (the timing frame), noticeable
// only on small frames.
//
// # Sharing between processes
//
// The ranks of an emulated host are different processes, so the resource
// table is a file that all processes of a job map: New creates
// occl-emu-<key> in Config.Dir (/dev/shm by default), or attaches to it.
// Its layout is a 4 KiB header (magic "OCCLEMU1", version, rank and NIC
// counts, creator pid, size) followed by int64 next-free times: for each
// NIC a 64-byte line for the transmit side and one for the receive side,
// then one word per ordered pair of ranks. All processes of a job must use
// topologies with the same rank and NIC counts.
//
// Attaching processes hold a shared open-file-description lock on the
// file; the kernel drops it when a process exits or is killed. Whoever
// attaches while nobody holds it (a new file, or one left by killed
// processes) initialises the file; the last process to detach (Close of
// the Fabric and of every Conn it wrapped) removes it. A file left by a job
// whose processes were all killed is reused by the next job with the same
// key, and CleanStale removes such files for keys that will not come back;
// neither touches the file of a live job. With Config.Local the table is in
// process memory, for jobs whose ranks all live in one process.
//
// # Use
//
//	t, _ := topo.FromSpec("hosts=4x2,nics=host,hbd=8GB/s,eps=1GB/s")
//	f, err := emu.New(t, emu.Config{Key: fmt.Sprintf("%016x", commID)})
//	...
//	c, err := f.Wrap(conn, self, peer) // for every peer, on both sides
//	...
//	f.SetTopology(next) // after the circuits changed
//	...
//	c.Close() // every wrapped Conn
//	f.Close()
package emu
