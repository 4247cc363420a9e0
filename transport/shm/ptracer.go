package shm

import (
	"sync"

	"golang.org/x/sys/unix"
)

// ptracerAny is PR_SET_PTRACER_ANY: any process may be this one's ptracer.
const ptracerAny = ^uintptr(0)

// peerReads is allowPeerReads' one call and its result.
var peerReads struct {
	once sync.Once
	err  error
}

// allowPeerReads lets other processes read this one's memory where the
// Yama security module would let only its ancestors: with
// kernel.yama.ptrace_scope 1 (Ubuntu's default) process_vm_readv and
// pidfd_getfd, which single copies rest on, need a ptracer's permission,
// which a peer rank, a sibling and not an ancestor, lacks. It declares
// every process a permitted ptracer of this one (PR_SET_PTRACER_ANY), as
// Open MPI's shared-memory transport and torch's tensorpipe do for the
// same system calls; the kernel's own checks (the same user, a dumpable
// process) still apply, so this gives Yama's relational mode the rule of
// a system without Yama, for this process only. Without Yama the call
// fails with EINVAL and changes nothing; with ptrace_scope 2 or 3 it does
// not help, and the peer's probe finds this memory unreadable, as it
// would have. Setup calls it, once per process, before it offers its
// memory (not where cross-memory attach is off: Config.NoCMA).
func allowPeerReads() error {
	peerReads.once.Do(func() {
		peerReads.err = unix.Prctl(unix.PR_SET_PTRACER, ptracerAny, 0, 0, 0)
	})
	return peerReads.err
}
