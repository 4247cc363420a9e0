package algo

// Workspace hands out staging buffers to schedules. A communicator keeps one
// Workspace and passes it to every operation it runs, so buffers are
// allocated once and reused. A Workspace is not safe for concurrent use; one
// operation runs at a time on a communicator.
type Workspace struct {
	slots    [][]byte
	ints     [][]int
	subs     []*eagerSubPeers
	children []*Workspace
	routed   *routedScratch
	reduce   *reduction
}

// reduction returns the Workspace's reduction (see recvReduce), made on
// first use.
func (w *Workspace) reduction() *reduction {
	if w.reduce == nil {
		w.reduce = new(reduction)
	}
	return w.reduce
}

// Ints returns n ints for the given slot, zeroed: a schedule's offsets,
// lengths and rank lists, made once and reused like Get's buffers. The
// slice stays valid until the next call to Ints with the same slot;
// different slots never alias. The slots are the Ints constants below.
func (w *Workspace) Ints(slot, n int) []int {
	for len(w.ints) <= slot {
		w.ints = append(w.ints, nil)
	}
	if cap(w.ints[slot]) < n {
		w.ints[slot] = make([]int, n)
	}
	s := w.ints[slot][:n]
	clear(s)
	return s
}

// Ints and Sub slots: a schedule that runs another on the same Workspace
// uses slots the inner one does not.
const (
	// IntsBlocks and IntsBlockLens hold a flat schedule's block offsets
	// and lengths (see Args.blockLayout).
	IntsBlocks    = 0
	IntsBlockLens = 1
	// IntsHier... hold the hierarchical schedules' rank positions, rail
	// and block layouts.
	IntsHierPos  = 2
	IntsHierRail = 3
	IntsHierOffs = 4
	IntsHierLens = 5
	// IntsSegs holds a ring reduce-scatter's segment bounds.
	IntsSegs = 6

	// SubRing is the view of the topology's ring (Args.ring); SubHier
	// the hierarchical schedules' rail or host.
	SubRing = 0
	SubHier = 1
)

// Get returns a buffer of n bytes for the given slot. The contents are
// undefined. The buffer stays valid until the next call to Get with the same
// slot; different slots never alias.
func (w *Workspace) Get(slot, n int) []byte {
	for len(w.slots) <= slot {
		w.slots = append(w.slots, nil)
	}
	if cap(w.slots[slot]) < n {
		// Round up so that slowly growing sizes do not reallocate each time.
		c := n
		if c < 4096 {
			c = 4096
		} else {
			c += c / 4
		}
		w.slots[slot] = make([]byte, c)
	}
	return w.slots[slot][:n]
}

// Workspace slots: the buffer each schedule stages in. A schedule that
// runs another on the same Workspace (the hierarchical and gateway
// schedules run the ring ones) keeps its own data in a slot the inner one
// does not use.
const (
	// SlotStage stages what a flat schedule receives before it reduces
	// it: ring reduce-scatter, all-reduce and reduce, recursive doubling
	// and halving-doubling all-reduce, tree reduce, and the schedules
	// made of them (hierarchical, gateway and 2D all-reduce).
	SlotStage = 0
	// SlotHierStage holds the rail-major copy of the data of the
	// hierarchical all-gather and reduce-scatter, while the ring schedules
	// they run stage in SlotStage.
	SlotHierStage = 1
	// SlotCaller is never used by a schedule: a caller may keep a buffer
	// there while it runs schedules (comm keeps an all-to-all's exchanged
	// counts there).
	SlotCaller = 15
	// SlotInput holds the private copy of an input that a Schedule would
	// otherwise overwrite (the non-root ranks of a reduce, an out-of-place
	// reduce-scatter, an in-place all-to-all).
	SlotInput = 16
)

// SlotRoutedPack is the slot in which phase k of a routed all-to-all packs
// the blocks it sends.
func SlotRoutedPack(k int) int { return 2 * k }

// SlotRoutedStage is the slot in which phase k of a routed all-to-all
// receives its blocks.
func SlotRoutedStage(k int) int { return 2*k + 1 }
