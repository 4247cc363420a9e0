// Package rdma is occl's RDMA transport: a transport.Conn over one
// reliable-connected (RC) queue pair per pair of ranks, on InfiniBand or
// RoCE through the verbs API, with the same semantics as the TCP
// transport (ordered frames, header checks, deadlines, cancellation, the
// same errors).
//
// The protocol is pure Go, written against the small verbs interface of
// package verbs, which has two implementations: libibverbs through cgo
// (build tag rdma) and an emulation that carries RDMA WRITEs between the
// processes of one machine over Unix sockets (see "Emulated verbs").
//
// # Setup
//
// Connect runs over an established connection to the peer (for a
// communicator, its authenticated TCP connection, as shared memory does).
// Each side opens its device (one per process, shared by its connections,
// with one protection domain and one registration cache), creates a
// completion queue and an RC queue pair, moves it RESET → INIT (port,
// P_Key index 0, LOCAL_WRITE | REMOTE_WRITE), maps and registers its
// receive window and its receive buffers, posts every receive, and sends
// its connection data: QP number, a random 24-bit PSN, LID, GID and GID
// index, port, active MTU, link layer, the window's address, remote key
// and geometry, its rendezvous chunk. Each side checks the peer's data,
// registers a staging area shaped like the peer's window, and moves its
// queue pair INIT → RTR (address vector towards the peer: global with the
// peer's GID and this side's GID index on RoCE or across InfiniBand
// subnets, the LID otherwise; path MTU the smaller of the two;
// destination QP number; rq_psn the peer's PSN; max_dest_rd_atomic 1;
// min_rnr_timer 12) and RTR → RTS (sq_psn its own PSN; timeout 20, i.e.
// 4.3 s; retry_cnt 7; rnr_retry 7; max_rd_atomic 1), NCCL's values. A
// second exchange says whether both sides got there, so no request ever
// reaches a queue pair that is not ready to receive; if either side
// failed, both return an error wrapping ErrUnavailable and the bootstrap
// connection is still usable. Afterwards the bootstrap connection carries
// nothing but is watched: when the peer's process dies, its kernel closes
// it.
//
// # Data path: window, credits, chunks
//
// Each side owns a receive window of Slots slots of SlotSize bytes
// (default 32 × 64 KiB), registered with REMOTE_WRITE, which only the peer
// writes, with RDMA WRITE WITH IMMEDIATE; the immediate data says what
// arrived (top 4 bits) and carries the slot's sequence number modulo 2^28.
// A frame's first slot starts with a 64-byte preamble (the 56-byte
// transport.Header, a rendezvous sequence number, 4 reserved bytes)
// followed by as much payload as fits; the rest of a larger frame follows
// in continuation slots. A frame larger than the whole window streams
// through it as the receiver frees slots.
//
// Flow control is credit based: the sender starts with one credit per slot
// of the peer's window and spends one per slot it writes; it never writes
// without a credit, so it never overruns the window. The receiver returns
// credits when it has consumed a batch of ceil(Slots/4) slots, with a
// zero-length RDMA WRITE WITH IMMEDIATE carrying the count, so at most 4
// credit messages are ever in flight. Every message that consumes a posted
// receive is thus bounded (slots + 4 credit returns + one clear-to-send,
// one rendezvous completion, one close notice), and the receive queue is
// sized for all of them: no message ever finds the receiver without a
// posted receive (receiver-not-ready), which the emulation counts and the
// tests check. The receiver checks every arrival: slot sequence, window
// not overrun, byte count within the slot and consistent with the frame,
// credits never more than the slots in use. A violation is a
// *transport.FrameError.
//
// The sender copies a slot's bytes into its staging area (registered,
// mirroring the peer's window slot for slot) and posts the write; the
// staging slot is reused once the write completed. Send of an eager frame
// therefore returns without waiting for the receiver. EagerLimit is the
// largest frame that fits in the window whatever credits the receiver
// holds back ((SlotSize−64) + (Slots − ceil(Slots/4)) × SlotSize), capped
// at 256 KiB by default: a Send of at most EagerLimit bytes completes
// without the peer receiving, provided it received every earlier frame,
// as transport.Conn requires.
//
// # Rendezvous
//
// A frame larger than RendezvousThreshold (by default the eager limit)
// goes by rendezvous, zero copy. The sender registers its payload (through
// the cache) and writes a rendezvous request: a first slot holding only
// the preamble. The receiver checks the header against what it expects
// (a mismatch leaves the frame unconsumed and returns a
// *transport.MismatchError, as everywhere), registers its buffer with
// REMOTE_WRITE and answers with a clear-to-send, a 32-byte SEND carrying
// the buffer's address, remote key and length. The sender RDMA WRITEs
// straight from its payload into that buffer, in writes of at most
// RendezvousChunk bytes (4 MiB, at most the port's maximum message size),
// at most 16 in flight, the last one WITH IMMEDIATE; RC ordering makes
// every earlier write visible when the receiver sees the last one's
// completion, whose byte count it checks. Send returns once every write
// completed. A side that cannot register its buffer still delivers it:
// the receiver declines (the sender then streams the payload through the
// window) or the sender streams without asking.
//
// A rendezvous abandoned half way (context ended, connection closed) is
// made safe before the call returns: the queue pair goes to ERROR, so
// nothing more is placed; the receiver drops its buffer's registration, so
// the remote key the peer holds is dead; the sender waits until the device
// gave back (flushed) every write that read its payload. The connection is
// then broken, as the transport.Conn contract allows after any error.
//
// # Registration cache
//
// Registering memory pins it and costs a system call per page range, so
// user buffers are registered once and kept (RegCache): a lookup hits
// when a cached region with the needed rights contains the buffer; a miss
// registers the buffer extended to its capacity (so the later chunks of a
// pipelined collective hit); idle regions are evicted least recently used
// first beyond 1 GiB or 256 regions; regions in use are never evicted
// (beyond the bounds a region is registered for one use); Invalidate
// deregisters. A cached region keeps its Go buffer referenced, so the
// garbage collector can neither free nor move it while the device may
// touch it, and a cached address always means the same memory. Memory Go
// does not own (C's malloc, mmap) is registered for each use instead, once
// SetForeignBuffers says such memory may be given, as the C library does:
// freed and mapped again at the same address, it is other pages. The cgo
// verbs pin Go memory with runtime.Pinner while it is registered, as the
// cgo rules require of memory C keeps a pointer to; windows and staging
// areas are mmap'd, outside the Go heap.
//
// # Completions and waiting
//
// One completion queue per connection receives both directions'
// completions; Send and Recv (which may run concurrently) poll it under a
// mutex and apply what they find to shared state (credits, arrivals,
// clear-to-sends, staging slots), then check their own condition. A call
// that cannot proceed spins briefly, yields, then waits: on the emulated
// devices for the completion queue's notification (like a completion
// channel), on hardware for 5 µs growing to 100 µs between polls, always
// also for its context, Close, and the other direction's progress.
//
// # Errors
//
// Failures surface as the TCP transport's errors: a failed work request
// (transport retries exceeded, remote access error, flushed after the
// peer's queue pair failed), the loss of the bootstrap connection, the
// peer's close notice (sent by Close, after which what the peer sent
// before is still delivered) all give an error wrapping
// transport.ErrPeerClosed that names the verbs status; a removed device
// (or IBV_EVENT_DEVICE_FATAL) also wraps verbs.ErrDeviceRemoved; a local
// Close gives transport.ErrClosed; an ended context its error; malformed
// control data from the peer a *transport.FrameError. After a fatal error
// the connection closes its bootstrap connection, so that the peer learns
// of it at once, as of a reset TCP connection.
//
// # Running on InfiniBand or RoCE
//
// Build with the rdma tag (needs cgo and rdma-core's development files,
// libibverbs-dev on Debian and Ubuntu, rdma-core-devel on RHEL):
//
//	go build -tags rdma ./...
//	OCCL_TRANSPORT=rdma OCCL_IB_HCA=mlx5_0:1 occl-bench -np 2 -op allreduce
//
// OCCL_TRANSPORT=rdma (comm.WithTransport(comm.TransportRDMA)) puts every
// pair of ranks on RDMA; there is no fallback, a rank without a usable
// device fails Init with an error saying why. The device and port: the
// first ACTIVE port of the devices ibv_get_device_list returns, the one
// behind the network interface the bootstrap TCP connections use first
// (mapped through github.com/Mellanox/rdmamap); OCCL_IB_HCA restricts them in NCCL_IB_HCA's
// syntax ("mlx5_0:1,mlx5_1:1", "^mlx5_2" to exclude, "=mlx5_1" for an
// exact name; a network interface name stands for its device). On RoCE
// the GID index matters: by default the first RoCE v2 entry with an
// IPv4-mapped address (then a routable IPv6 one, then any RoCE v2 entry),
// from the kernel's gid_attrs in sysfs; OCCL_IB_GID_INDEX forces one (see
// show_gids or /sys/class/infiniband/DEV/ports/PORT/gid_attrs). Also:
// OCCL_IB_TIMEOUT, OCCL_IB_RETRY_CNT, OCCL_IB_SL, OCCL_IB_TC (traffic
// class, e.g. for the lossless priority of a RoCE fabric), and
// OCCL_IB_SLOTS, OCCL_IB_SLOT_SIZE, OCCL_IB_EAGER_LIMIT,
// OCCL_IB_RNDV_THRESHOLD ("off"), OCCL_IB_RNDV_CHUNK. Registered memory
// is pinned: raise the locked-memory limit (ulimit -l unlimited, or
// LimitMEMLOCK in systemd units and containers) or registrations fail
// with ENOMEM.
//
// Soft-RoCE (rdma_rxe) gives a RoCE v2 device on any Ethernet interface
// where the kernel provides the module:
//
//	modprobe rdma_rxe
//	rdma link add rxe0 type rxe netdev eth0
//	ibv_devices; ibv_devinfo -d rxe0
//	go test -tags rdma ./transport/rdma/...      # hardware tests run on rxe0
//	OCCL_TRANSPORT=rdma OCCL_IB_HCA=rxe0 occl-bench -np 2 -op allreduce
//
// Soft-RoCE uses UDP port 4791, which firewalls must let through between
// hosts.
//
// # Emulated verbs
//
// OCCL_IB_EMULATE=1 (or "ib" for an InfiniBand port with LID routing) runs
// the transport over emulated verbs (verbs.OpenEmulated) where there is no
// device: each process gets an emulated NIC, emu0, whose queue pairs carry
// RDMA WRITEs and SENDs to the peer's NIC over a Unix socket in the
// abstract namespace; the peer's NIC checks keys, rights and bounds and
// places the data in the registered memory, consumes posted receives and
// generates completions, in order, with the verbs' state machine and
// error semantics (package verbs documents what it does and does not
// emulate). occl-bench prints a note when it runs on emulated verbs: its
// numbers then measure the emulation, not RDMA.
//
// # What was verified where
//
// Verified over the emulated verbs, across real processes (the machine
// this was written on has no RDMA device and its kernel cannot load
// rdma_rxe): the whole protocol (setup and connection data exchange,
// RTR/RTS transitions, credits, chunking, rendezvous, registration cache,
// error paths, close), the transporttest conformance suite, every
// collective of comm with OCCL_TRANSPORT=rdma, rewiring, process death,
// fuzzing of every decoder. The cgo implementation compiles and vets with
// libibverbs-dev (go vet -tags rdma ./...), and its enum numbering is
// checked against the headers at build time; ibv_get_device_list ran
// (returning no device) but no other libibverbs call has run against a
// device: opening devices, port and GID queries, registration of pinned Go
// memory, QP transitions with real address vectors, posting, polling,
// asynchronous events and the performance of the polling loop need real
// hardware or soft-RoCE (go test -tags rdma ./transport/rdma/... runs the
// conformance suite and the rendezvous and remote-access tests on the
// device the environment selects, and skips with "no RDMA device" where
// there is none).
package rdma
