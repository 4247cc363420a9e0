// Package shm is occl's same-host transport: two processes (or two
// goroutines) exchange frames through rings in shared memory, one ring per
// direction. Large payloads can instead be copied once, straight from the
// sender's buffer into the receiver's, by cross-memory attach.
//
// # Ring layout
//
// Each ring is a file, mapped MAP_SHARED by both sides: a 4 KiB control
// page followed by a data area whose size is a power of two (Capacity,
// 4 MiB by default). Each side populates its mapping and writes every
// page of it once (adding 0 to a word) when it maps it (unless
// Config.Lazy), so that the first lap takes no fault, not even a
// hypervisor's (see mapRing). The control page holds
//
//	  0  magic "OCCLSHM1", version, control page size, capacity,
//	     creator pid, 16-byte random nonce
//	128  tail: bytes ever written (written by the producer only)
//	256  head: bytes ever read (written by the consumer only)
//	384  data futex word (the consumer sleeps on it, the producer bumps it)
//	512  consumer-sleeping flag
//	640  space futex word (the producer sleeps on it, the consumer bumps it)
//	768  producer-sleeping flag, and the head it waits for
//	896  producer-closed flag
//	1024 consumer-closed flag
//	1152 done: descriptor transfers completed (written by the consumer only)
//	1280 done futex word (the producer sleeps on it, the consumer bumps it)
//	1408 producer-waiting-for-done flag
//	1536 producer-off-core count (see Waiting)
//	1664 consumer-off-core count
//	1792 claim: ticket of the last descriptor transfer the consumer claimed
//	     or, with the top bit set, the producer took back (see Offers)
//
// Each field that changes sits in its own 128-byte slot so that the two
// sides never write to the same cache line. Head and tail are free-running
// 64-bit byte counters; byte i of the stream lives at data[i mod capacity].
// A frame is the 56-byte transport.Header encoded with Encode, followed by
// the payload (or a descriptor, see below) and by padding up to the next
// multiple of 64 stream bytes, written as one byte stream that wraps
// around the end of the data area; a frame larger than the ring simply
// streams through it while the consumer drains it. Every frame thus
// starts on a cache line, and one with at most 8 payload bytes is one
// line. In the ring, the header's two reserved fields (zero on the wire)
// carry a flags byte (offset 7) and a 32-bit seal (offset 36).
//
// A payload of 9 to 24 bytes written in place (see "Sealed frames") goes
// in a short frame instead, one line: the header's first 8 bytes, then
// the step, the payload's length (32 bits), the seq and a 64-bit digest
// of the communicator, epoch, root and count (the fields that stay the
// same over an operation's frames; folded in one at a time through a
// bijection, so that headers that differ in one of them never share a
// digest), the seal at offset 36 and the payload from offset 40. The
// consumer checks the fields against the header it expects and the digest
// against that header's; a digest that differs is a mismatch
// (transport.MismatchError, Digested). With a full header such a payload
// takes two lines, and the consumer waits for the second after the seal
// arrives in the first. On a 2-core Intel Xeon virtual machine a 16-byte
// message to another process took 325-342 ns one way in short frames
// against 372-412 with the full header (8 bytes: 303-322; 4 runs each of
// BenchmarkTwoProcessesLatency), and a 32-byte AllToAll at 2 processes
// (16-byte blocks) was faster in 12 of 14 interleaved rounds, by about 3%.
//
// # Sealed frames
//
// A small frame (at most 4 KiB with its header and padding) that fits
// before the end of the data area and in the space free is written in
// place: the payload beyond the first line, then the header and the
// payload's first bytes, then the seal, a value derived from the frame's
// stream position that is never zero, and only then the tail. A consumer
// that knows the seal word of the frame it waits for to be clear polls
// that word, in the line it is about to read, instead of the tail: the
// frame arrives with the line that carries its seal, and the tail, on a
// line of its own, is not on the way (Open MPI's shared-memory fast boxes
// and NCCL's LL protocol let the flag travel with the data in the same
// way). It decodes and checks the header in place and copies the payload
// out, without staging the header or entering the general copy loop.
//
// The seal word is known to be clear by construction, not by chance: after
// publishing a frame of one or two lines, the producer keeps the seal words
// of the lines ahead of its tail cleared, up to 8 KiB ahead and within the
// space the consumer has freed, 4 lines at a time (the lines are the ones
// its next frames write anyway; after larger frames, whose receiver waits
// for all their lines anyway, the partial writes would cost more than the
// seal saves), and marks a small frame that ends where the words are clear
// with a flag, armed: the consumer polls the seal of the next frame only
// after reading an armed frame. Any other frame (the first, one behind a
// frame the general path wrote) is found by the tail. A frame the general
// path writes (one that is larger, wraps, or is lent) where the words are
// clear gets a mark in its seal word instead of a seal, once its header is
// in place: a consumer polling that word turns to the tail. An armed
// consumer thus reads the tail only in its last look before it sleeps or
// gives up:
// the tail's line, which the producer writes at every frame, would
// otherwise be a miss in the middle of the wait that delays the sight of
// the seal (on a 2-core AMD EPYC virtual machine, whose processes
// exchanged a cache line in 0.27-0.31 us, a round of an 8-byte exchange
// between two processes through the rings took 351 ns with the mark
// against 372 reading the tail every 16th round, medians of 6 interleaved
// rounds, faster in all 6: BenchmarkTwoProcessesExchange).
// Payload bytes of an earlier lap that look like a seal or a mark are
// thus never read as one, and a seal that is neither clear, nor the
// frame's own, nor its mark is reported as a corrupt ring.
//
// # Rewinding
//
// A run of small frames would walk through the whole data area, a fresh
// line (and every 64 frames a fresh page) each time, which neither
// processor has touched for a lap of the ring. So a producer about to
// write a small frame at offset 64 KiB of the data area or beyond
// (hotWindow), whose consumer has read enough of this lap that the ring
// keeps room for a frame of the eager limit after the rewind (the
// EagerLimit promise: a rewind must not turn a send that fits into one
// that waits, which deadlocks two ranks that send to each other before
// they receive), by the head it last saw, read afresh at most every 4 KiB,
// rewinds: it
// clears the seal words of the first 8 KiB of the next lap, writes a skip
// frame where the next frame would have gone (a control header whose Len
// covers the bytes up to the next lap, with a skip flag, armed and
// sealed), and writes the frame at the start of the next lap. The
// consumer checks the skip frame's header against its position, moves its
// head to the next lap, and reads on. Small frames thus cycle through the
// first part of the ring (the eager limit and 4 KiB, about 1 MiB of a 4
// MiB ring whose sends are not lent; 64 KiB where the eager limit is
// smaller), as through a smaller ring, while a large frame never rewinds
// and still has the whole ring. A skip frame at the start of
// a lap, one whose length does not end at the next lap, or one also marked
// lent is a corrupt ring. On a 2-core AMD EPYC virtual machine, with a
// window of 64 KiB whatever the eager limit (a first version, which
// deadlocked two ranks as above), 8-byte
// AllReduce at 2 processes took 0.55 and 0.52 us rewinding (medians of 6
// and 4 interleaved rounds) against 0.80 and 0.82 walking the 4 MiB ring
// (rings of 1 MiB and less: 0.51-0.55; of 2 MiB: 0.77), in one phase of
// that machine; in another, 0.67-0.74 against 0.96-0.99 in three rounds of
// four, as with a 64 KiB ring. With the window as it is, 0.71-0.79 against
// 0.90-1.03 (4 rounds, vader 0.51).
//
// # Memory ordering
//
// The producer copies bytes into the data area with ordinary stores (a
// piece of 16 KiB or more with REP MOVSB where the processor has fast
// string moves, see internal/memcopy: on a 2-core AMD EPYC virtual
// machine, for minutes at a time, 1 MiB AllToAll at 2 processes took 93-97
// us through the runtime's copy against 38-48 us through it; the first
// lap of a large payload with non-temporal stores, see putPayload, whose
// copy ends with SFENCE, which orders them before any later store) and
// then
// publishes them with an atomic store of tail; the consumer reads tail
// atomically, copies the bytes out and publishes head with an atomic
// store, after which the producer may overwrite them. The counters are
// accessed through sync/atomic on the mapped page. Go's atomics are
// sequentially consistent, and the hardware provides the same guarantees
// between processes as between threads because both map the same physical
// pages; on amd64 (total store order) an atomic load is a plain load,
// which is never reordered with later loads, and an atomic store is an
// XCHG, a full barrier, so data stores are visible before the counter that
// publishes them. A frame's seal is a plain store on amd64 (see the seal
// method): stores are not reordered with other stores there, and the
// compiler keeps their order, so the seal is visible only after the frame
// it closes; the consumer reads it atomically, a plain load. Elsewhere it
// is an atomic store. The race detector does not see memory outside the
// Go heap and ignores these accesses.
//
// Where both processes poll (Config.Spin, processes with a core each) and
// both can fence, the counters too are published with plain stores on
// amd64: an XCHG waits for the line of the counter, which the peer may be
// polling, and drains the store buffer, on every operation's critical
// path. What the XCHG also ordered, the publication before the
// publisher's read of the peer's sleeping flag (see below), the sleeper
// then provides: after setting its flag it issues membarrier(2)'s global
// expedited command, which runs a full barrier on every core that runs a
// registered process, before its last look at the counter. That costs
// 20-25 us on a virtual machine, once per sleep, which only comes after
// polling for the spin time (BenchmarkTwoProcessesExchange, 8-byte frames
// both ways: median 229 -> 210 ns).
//
// Each side keeps its own counter in process memory and only reads the
// other side's counter from the shared page, checking it before use: a
// head outside [last head seen, tail] or a tail outside [last tail seen,
// published head + capacity] is reported as a *transport.FrameError, never used as an
// index or a length. Geometry (capacity) is read and validated once at
// setup. Every header is decoded and checked with transport.Check before
// its payload is touched, so garbage in the ring yields an error, not a
// panic, an out-of-bounds access or an allocation sized by the garbage.
//
// # Single-copy transfers
//
// Through the ring every byte is copied twice. For large payloads the
// receiver can instead read the sender's buffer directly with
// process_vm_readv(2) (cross-memory attach, as in Open MPI's vader BTL):
// one copy, no ring space, and the sender's CPU is free while it waits.
//
// Setup decides per direction whether this is possible (see Connect):
// each side offers a probe, a page of random bytes, and the peer tries to
// read it back. Where that fails (ptrace restrictions such as Yama or a
// seccomp filter give EPERM, an old kernel ENOSYS, a peer in another pid
// namespace reads back the wrong bytes or ESRCH), that direction silently
// keeps the ring; Config.NoCMA turns the mechanism off. Before it offers
// its probe, a side declares every process a permitted ptracer of its own
// (allowPeerReads: PR_SET_PTRACER_ANY), so that Yama's default relational
// mode, which lets only ancestors read a process, does not keep sibling
// ranks from it. Both ends of one process may use it too: a process can
// read its own memory.
//
// On a direction that uses it, a payload of at least the sender's
// threshold (Config.CMAThreshold, DefaultCMAThreshold by default,
// announced in the offer) may travel by descriptor: when it is lent
// (Conn.Lend, transport.Lender), or sent with Send where
// Config.SendByDescriptor is set. All others go through the ring. The
// sender writes the frame header as usual, Len being the payload length,
// with the lent flag in the ring's flags byte (see "Sealed frames"),
// followed by a 32-byte descriptor instead of the payload: magic, address
// and length of its buffer, and a ticket that counts the descriptors sent
// on the ring. A receiver refuses the flag on a frame below the threshold
// the sender announced, or from a sender that announced none.
//
// A Send by descriptor returns once the receiver has copied the payload;
// Lend returns once the descriptor is in the ring, and Settle waits for
// the copies of everything lent. A rank of an all-to-all thus posts all
// its large blocks, copies its peers' out of their memory, and then waits
// for its own to be taken: one copy of every byte, as MPI's rendezvous
// over cross-memory attach makes, where the ring makes two.
// The receiver checks the header against what it expects
// (transport.Check), then the descriptor: magic, a length equal to its
// buffer's, the next ticket, an address range that does not wrap; a
// descriptor that fails is a *transport.FrameError. It then copies the
// payload straight into its buffer with process_vm_readv, in pieces of at
// most 4 MiB between which it notices cancellation and a closed
// connection, and publishes completion: it stores the ticket in the done
// counter of the ring's control page and wakes the sender if it sleeps.
// An address the sender never owned yields EFAULT, a process that is gone
// ESRCH; both become errors, never a panic.
//
// The sender's Send (or Settle) returns only when the done counter reaches
// its ticket, since the buffer is the caller's and must not change while it
// is read.
// It waits like every other wait below (spin briefly, then sleep on the
// done futex word), honours its context and notices a closed or dead peer.
// The Go garbage collector does not move heap objects, and Send (Lend,
// until Settle) keeps the slice referenced from the Conn, which also makes
// every buffer passed to it escape to the heap (a goroutine stack could
// move), so the address stays valid for as long as the receiver may use
// it. A Send or Settle that fails or is cancelled while the receiver may
// still read sets the producer-closed flag of its ring before it returns
// and the caller reuses the buffer. The receiver checks that flag after its copy and
// fails with transport.ErrPeerClosed if it is set, so it never delivers
// bytes that were read after the sender gave up; it also checks, through a
// pidfd of the peer opened at setup, that the pid it read from still names
// the peer, so a pid reused after the peer died cannot feed it foreign
// bytes. Since a frame sent by descriptor waits for the receiver,
// EagerLimit is kept below the threshold where Send uses descriptors.
//
// Communicators lend the blocks of an all-to-all (from 16 KiB where every
// rank has a core, 128 KiB where they share them: comm.WithSingleCopy)
// and send everything else through the ring: a Send by descriptor cannot
// return before the copy ends, so it cannot run ahead of the receiver as a
// pipelined sender does through the ring, and with every large message
// sent so 64 MiB AllReduce at 2 processes took 20% longer on a 2-core
// virtual machine. Lending does not wait, and there 1 MiB AllToAll took
// 121-130 us lent against 180-196 through the ring (Open MPI's vader
// 107-125), 64 MiB 14.9-15.0 ms against 19.7-20.6 (vader 17.0-17.6).
// That was on a processor without fast string moves; on one with them,
// a memory copy ran 4 times as fast as process_vm_readv, the rings' two
// copies beat the one, and 1 MiB AllToAll took 121-159 us lent against
// 60-79 through the rings in 6 rounds of 9 (175-201 in the others). So
// where every rank has a core, communicators lend if MeasureSingleCopy
// says one copy pays on this machine, and otherwise only blocks too
// large to stay in the cache with the rings (1 MiB).
//
// # Offers
//
// A Send must return without the receiver when the ring has room for it
// (transport.Buffered), so that a rank may receive it in a later
// operation; a lent payload waits for its receiver. An offer
// (Conn.Offer, transport.Offerer, from Config.OfferThreshold, announced
// in the setup offer next to the threshold) is lent for as long as the
// sender has nothing else to send on the connection: its frame is a lent
// one, and the sender makes sure at offer time that the ring also has
// room for the payload. Before it copies any lent payload, the receiver
// claims the transfer: a compare-and-swap of the claim word from the
// value it holds, below the ticket, to the ticket. The sender's Settle,
// or its next Send or Lend on the connection, takes an unclaimed offer
// back with a compare-and-swap of the same word to the ticket with the
// top bit set, and then writes the payload into the ring after the
// descriptor; a receiver that finds the word so marked reads the payload
// from the ring instead of the sender's memory. One of the two wins, so
// the payload is copied once, by the receiver, if it claimed in time, and
// otherwise twice, as through the ring, and the sender never waits for
// the receiver to arrive (it waits only for a copy already begun). A
// sender offers only once everything it lent before has been copied, so
// a receiver that finds a later ticket marked taken back knows that the
// transfer it reads was taken back too. Communicators offer the sends of
// a group (comm.Group) from 32 KiB where every rank has a core and from
// 64 KiB where they share the cores, up to the eager limit; above it a
// group's sends are lent.
//
// # Viewed receives
//
// RecvView (transport.Viewer) hands a payload to its receiver where it
// lies in the ring instead of copying it into the receiver's buffer: a
// schedule that reduces a received chunk into its own data so reads every
// byte once, where Recv would write it to a staging buffer and the
// reduction read it back. The pieces are cut by the ring's end and by how
// far the producer has written (every chunk it publishes), rounded to
// whole elements (an element split between two pieces is handed from a
// copy of its bytes); the consumer's head moves past a piece only after
// the piece is handed back, so the producer cannot overwrite it while it
// is read. A lent payload is copied out of the sender's memory into the
// caller's buffer, as Recv does, and handed whole.
//
// # Waiting
//
// A side that cannot make progress re-reads the shared counter a few dozen
// times. Then, if every process has a core (Config.Spin > 0), it keeps
// polling for the spin time, letting the process's other goroutines run
// every 16th round (not every round: from a thread locked to its
// goroutine, as calls from C are, each such yield costs two context
// switches); if the processes outnumber the cores it yields to other
// goroutines up to 128 times instead (from a locked thread each yield also
// lets other processes run), since polling would take the core from the
// peer it waits for. A small operation's wait there gives its core to the
// other processes (sched_yield), unless the peer it waits for is running:
// every process marks, in the control page of each ring it shares, when
// it gives its core away or sleeps, and a wait for a peer not so marked
// polls on for a while instead, since that peer runs on another core and
// a yield would only hand this one to a process that waits as well. The
// waits of an all-to-all whose large blocks are lent (transport.WithCopyWait)
// give the core away with sched_yield between polls from the start, for up
// to 20 ms: they last as long as the busiest receiver's copies, and that
// receiver may share the core. After that a wait sleeps with FUTEX_WAIT on its ring's
// futex word (the shared, not the process-private, futex operations, since
// the word lives in memory
// shared between processes). It announces the sleep in a flag; the other
// side issues FUTEX_WAKE only when that flag is set, and clears it as it
// does, so the fast path makes no system call and one sleep costs one
// wake-up; the flag stays set across the sleep's slices until a wake-up
// clears it. A producer that finds the ring full waits for a sizeable amount
// of space (256 KiB, or a quarter of a small ring) and publishes the head it
// waits for, so it refills the ring in large pieces instead of waking for
// every frame the consumer takes. A sleep lasts at most 100 µs, or until the
// context's deadline if that comes first, so cancellation and a dead peer
// are noticed even without a wake-up.
//
// # Setup, liveness and cleanup
//
// Connect runs the setup over an existing connection to the peer (for a
// communicator, its authenticated TCP connection): each side creates the
// ring it writes under /dev/shm (os.TempDir() if that does not exist),
// named occl-<comm>-<from>-<to>-<epoch>-<pid>-<random>, announces it with
// its probe, maps the peer's ring, unlinks it and probes the peer; the
// acks carry the probe results. Both files are gone from the directory
// when Connect returns, so nothing is left behind if a process is killed
// later. CleanStale removes the files of processes killed during setup.
//
// After setup the control connection carries nothing; the Conn owns it and
// watches it. When the peer's process dies the kernel closes its socket,
// the watch sees the error, marks the peer gone and wakes any sleeper, so a
// pending Send or Recv fails promptly with an error wrapping
// transport.ErrPeerClosed: that includes a Send waiting for the peer to
// copy its buffer, and a Recv copying from a peer that dies (its next
// piece fails with ESRCH, or it sees the peer gone between pieces). Close sets this side's closed flags in shared
// memory, wakes the peer and closes the control connection.
package shm
