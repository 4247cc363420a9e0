package shm

import (
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/internal/memcopy"
)

// SingleCopyRate says how a machine moves a block: by one
// process_vm_readv, as a lent payload goes, or by one memory copy, of
// which the rings make two per byte (into the ring, out of it).
type SingleCopyRate struct {
	// Block is the size measured, in bytes.
	Block int
	// CMA is the fastest process_vm_readv of Block bytes seen.
	CMA time.Duration
	// Copy is the fastest memory copy of Block bytes seen (the copy the
	// rings use, internal/memcopy).
	Copy time.Duration
	// Err is why process_vm_readv could not be measured, nil if it was.
	Err error
}

// Pays reports whether one process_vm_readv of a block takes less than
// the two memory copies that move it through a ring (see ringCopies).
func (r SingleCopyRate) Pays() bool {
	return r.Err == nil && float64(r.CMA) < ringCopies*float64(r.Copy)
}

// ringCopies is what a ring's two copies of a block cost, counted in
// copies within one process. They cost more than two, likely because the
// reader's copy reads lines that another core has just written (not
// measured apart). The factor lies between
// what two machines showed, both 2-core virtual machines at 2 processes:
// on an AMD EPYC, process_vm_readv took 3 to 4.5 times as long as a copy
// (27-32 us against 7-9 for 256 KiB) and lending lost (1 MiB AllToAll, 121-159 us lent against 60-79 through
// the rings); on an Intel Sapphire Rapids it took 1.8-2.2 times as long,
// so that a factor of 2 gave one verdict or the other from one process
// to the next, and lending won (6 interleaved rounds, medians lent /
// rings: 256 KiB AllToAll 15.8 / 20.8 us, 1 MiB 106 / 122 us). On an
// Intel Xeon, measured at the start of 24 occl-bench runs of 2 processes
// (the fastest of 32 rounds), it took 2.02 to 2.55 times as long, and
// lending won by more (256 KiB 21.6 / 36.0 us, 1 MiB 126 / 180 us): the
// factor sits midway between that machine's highest and the EPYC's
// lowest. The EPYC's ratios were read with the fastest of 8 rounds (see
// rateRounds), which reads high; with 32 it may come closer to the
// factor: not measured, that machine was not available again.
const ringCopies = 2.75

// String gives the two times and the verdict, for logs.
func (r SingleCopyRate) String() string {
	if r.Err != nil {
		return fmt.Sprintf("process_vm_readv unavailable: %v", r.Err)
	}
	return fmt.Sprintf("%d B: process_vm_readv %v, memory copy %v (single copy pays: %v)", r.Block, r.CMA, r.Copy, r.Pays())
}

// Measured block and rounds: a block the size the lent all-to-all moves
// at 1 MiB between 2 ranks, small enough to stay in the cache as the
// blocks of a pipelined exchange do, and rounds interleaved so that a
// machine busy for part of the measurement slows both alike. The fastest
// of 8 rounds left the verdict to chance on a machine whose ratio lies
// near ringCopies: on a 2-core Intel Xeon virtual machine, 12 measurements
// of 8 rounds in one process gave ratios of 2.04 to 2.80, a quarter of
// them above 2.5, and at the start of a run, where both ranks measure at
// once, more were: a 1 MiB AllToAll of 2 processes went through the rings
// (over 180 us against 116-143 lent) in 6 of 10 runs. 36 measurements of
// 32 rounds gave 2.00 to 2.39. The slowest process_vm_readv rounds are the
// ones that vary (the pinning of the pages), and more rounds find the fast
// ones.
const (
	rateBlock  = 256 << 10
	rateRounds = 32
)

var (
	rateOnce sync.Once
	rate     SingleCopyRate
)

// MeasureSingleCopy measures, once per process, how fast this machine
// moves a block by process_vm_readv and by a memory copy, reading the
// process's own memory (the kernel pins and copies the pages as it does
// for a peer's). It takes about a millisecond, on the first call.
//
// The two rates differ by machine more than by anything occl controls.
// On a 2-core AMD EPYC virtual machine with fast string moves (ERMS) and
// a 32 MiB L3, a C loop moved 512 KiB between two processes at 7.6 GB/s
// by process_vm_readv against 31 GB/s by memcpy in one process (this
// measurement: 256 KiB in 27-32 us against 7-9 us), so the rings' two
// copies were faster; on the same virtual machine placed on a processor
// without ERMS and with an 8 MiB L3, 1 MiB crossed between processes at
// about 5.5 GB/s through the ring and by process_vm_readv alike, and one
// copy won. This measurement was not taken there: that it says "pays"
// on such a processor is expected from those rates, not seen.
func MeasureSingleCopy() SingleCopyRate {
	rateOnce.Do(func() { rate = measureSingleCopy(rateBlock, rateRounds) })
	return rate
}

func measureSingleCopy(block, rounds int) SingleCopyRate {
	r := SingleCopyRate{Block: block}
	src, dst := make([]byte, block), make([]byte, block)
	for i := range src {
		src[i] = byte(i)
	}
	clear(dst)
	liov := []unix.Iovec{{Base: &dst[0]}}
	liov[0].SetLen(block)
	riov := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(unsafe.SliceData(src))), Len: block}}
	pid := os.Getpid()
	for i := range rounds {
		t0 := time.Now()
		n, errno := readPeer(pid, &liov[0], &riov[0])
		t1 := time.Now()
		var err error
		switch {
		case errno != 0:
			err = errno
		case n != block:
			err = fmt.Errorf("read %d of %d bytes", n, block)
		}
		if err != nil {
			r.Err = fmt.Errorf("process_vm_readv: %w", err)
			return r
		}
		memcopy.Copy(dst, src)
		t2 := time.Now()
		if c := t1.Sub(t0); i == 0 || c < r.CMA {
			r.CMA = c
		}
		if c := t2.Sub(t1); i == 0 || c < r.Copy {
			r.Copy = c
		}
	}
	return r
}
