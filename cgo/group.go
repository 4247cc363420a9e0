package main

// #include "occl_cgo.h"
import "C"

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/occl/occl/comm"
)

// This file: occlGroupStart / occlGroupEnd. The open group of a thread is
// named by an id in the thread's C thread-local storage (internal.c); its
// recorded calls are in groups, in Go. Only the owning thread touches a
// groupState, so it needs no lock of its own.

// groupState is what a thread has recorded since its outermost
// occlGroupStart.
type groupState struct {
	creates  []pendingCreate
	ops      []groupOp
	destroys []*comm.Communicator
}

// pendingCreate is a communicator creation deferred to occlGroupEnd. ce is
// the reserved entry (nil for a split with OCCL_SPLIT_NOCOLOR); parent is
// the communicator a split, shrink or grow runs on (nil for the others).
type pendingCreate struct {
	name   string
	ce     *commEntry
	parent *comm.Communicator
	mk     func(ctx context.Context) (*comm.Communicator, error)
}

// groupOp is one operation: a collective (issue or run, on x) or a send or
// receive. issue and run are static functions of the operands, so that
// preparing an operation allocates nothing but the groupOp.
type groupOp struct {
	name string
	ce   *commEntry
	c    *comm.Communicator
	ctx  context.Context

	issue func(ctx context.Context, c *comm.Communicator, x operands) *comm.Request
	run   func(ctx context.Context, c *comm.Communicator, x operands) error // issue's blocking form
	x     operands

	send bool
	buf  comm.Buffer
	peer int
}

// start issues the operation on its own.
func (o *groupOp) start() *comm.Request {
	switch {
	case o.issue != nil:
		return o.issue(o.ctx, o.c, o.x)
	case o.send:
		return o.c.SendAsync(o.ctx, o.buf, o.peer)
	default:
		return o.c.RecvAsync(o.ctx, o.buf, o.peer)
	}
}

// call runs the operation to completion on its own. The blocking forms of
// the Go API run it on the calling thread without waking the
// communicator's worker, and recycle its request.
func (o *groupOp) call() error {
	switch {
	case o.run != nil:
		return o.run(o.ctx, o.c, o.x)
	case o.issue != nil:
		return o.start().Wait(context.Background())
	case o.send:
		return o.c.Send(o.ctx, o.buf, o.peer)
	default:
		return o.c.Recv(o.ctx, o.buf, o.peer)
	}
}

// groups holds the open group of every thread that has one, by id. open
// counts them: while no thread has one, an operation need not ask C for its
// thread's (a call into C costs as much as the rest of the lookup).
var groups = struct {
	sync.Mutex
	next uint64
	m    map[uint64]*groupState
	open atomic.Int64
}{m: map[uint64]*groupState{}}

// openGroup returns the calling thread's open group, nil if none.
func openGroup() *groupState {
	if groups.open.Load() == 0 {
		return nil
	}
	var depth C.int
	id := uint64(C.occlInternalGroup(&depth))
	if id == 0 {
		return nil
	}
	groups.Lock()
	defer groups.Unlock()
	return groups.m[id]
}

// occlGroupStart opens (or nests) the calling thread's group. See occl.h.
//
//export occlGroupStart
func occlGroupStart() (res C.occlResult_t) {
	k := begin("occlGroupStart")
	defer k.end(&res)
	var depth C.int
	id := uint64(C.occlInternalGroup(&depth))
	if id == 0 {
		groups.Lock()
		groups.next++
		id = groups.next
		groups.m[id] = &groupState{}
		groups.open.Add(1)
		groups.Unlock()
	}
	C.occlInternalSetGroup(C.uint64_t(id), depth+1)
	return resSuccess
}

// chains returns the indices of g.creates in the groups that run one after
// another: those of one parent, in recorded order, and every creation
// without a parent alone.
func (g *groupState) chains() [][]int {
	var out [][]int
	of := map[*comm.Communicator]int{} // parent -> its chain in out
	for i, pc := range g.creates {
		if pc.parent == nil {
			out = append(out, []int{i})
			continue
		}
		j, ok := of[pc.parent]
		if !ok {
			j = len(out)
			of[pc.parent] = j
			out = append(out, nil)
		}
		out[j] = append(out[j], i)
	}
	return out
}

// make runs the creation and stores the communicator in its reserved
// entry; a panic becomes its error.
func (pc *pendingCreate) make() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errInternal(r)
		}
	}()
	c, err := pc.mk(context.Background())
	switch {
	case err != nil:
		return err
	case pc.ce != nil && c != nil:
		pc.ce.c.Store(c)
	case c != nil:
		c.Abort()
	}
	return nil
}

// occlGroupEnd closes the calling thread's group and runs what it recorded. See occl.h.
//
//export occlGroupEnd
func occlGroupEnd() (res C.occlResult_t) {
	k := begin("occlGroupEnd")
	defer k.end(&res)
	var depth C.int
	id := uint64(C.occlInternalGroup(&depth))
	if id == 0 {
		return k.fail(resInvalidUsage, "no group is open on this thread (occlGroupEnd without occlGroupStart)")
	}
	if depth > 1 {
		C.occlInternalSetGroup(C.uint64_t(id), depth-1)
		return resSuccess
	}
	C.occlInternalSetGroup(0, 0)
	groups.Lock()
	g := groups.m[id]
	if g != nil {
		delete(groups.m, id)
		groups.open.Add(-1)
	}
	groups.Unlock()
	if g == nil {
		return resSuccess
	}
	return g.run(k)
}

// run executes a closed group: creations concurrently, then the operations,
// then the destructions concurrently.
// It returns the first failure; every failure is recorded on its
// communicator.
func (g *groupState) run(k *call) C.occlResult_t {
	first := C.occlResult_t(resSuccess)
	var firstMsg string
	note := func(name string, ce *commEntry, err error) {
		if err == nil {
			return
		}
		kk := &call{name: name, ce: ce}
		code := kk.failErr(err)
		if first == resSuccess {
			first, firstMsg = code, name+": "+err.Error()
		}
	}

	// Creations: concurrently, so that one thread can create all the ranks
	// of a communicator, except those made from one parent: a split,
	// shrink or grow is an operation of its parent, and two of them run in
	// the order every rank recorded them (concurrently, each rank's parent
	// could take them in another order, and the ranks would pair the
	// wrong ones).
	errs := make([]error, len(g.creates))
	var wg sync.WaitGroup
	for _, chain := range g.chains() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range chain {
				errs[i] = g.creates[i].make()
			}
		}()
	}
	wg.Wait()
	for i, pc := range g.creates {
		if errs[i] != nil {
			if pc.ce != nil {
				removeComm(pc.ce)
			}
			note(pc.name, nil, errs[i])
		}
	}

	// Operations: in call order per communicator, the sends and receives of
	// a communicator as one comm.Group at the place of its first one.
	type issued struct {
		name string
		ce   *commEntry
		req  *comm.Request
	}
	p2p := map[*commEntry]*comm.Group{}
	var order []func() issued
	for _, o := range g.ops {
		if o.issue != nil {
			order = append(order, func() issued {
				req := o.start()
				o.x.release()
				return issued{o.name, o.ce, req}
			})
			continue
		}
		grp := p2p[o.ce]
		if grp == nil {
			grp = o.c.NewGroup()
			p2p[o.ce] = grp
			ctx := o.ctx
			order = append(order, func() issued { return issued{"occlGroupEnd", o.ce, grp.Start(ctx)} })
		}
		if o.send {
			grp.Send(o.buf, o.peer)
		} else {
			grp.Recv(o.buf, o.peer)
		}
	}
	reqs := make([]issued, 0, len(order))
	for _, f := range order {
		reqs = append(reqs, f())
	}
	for _, r := range reqs {
		note(r.name, r.ce, r.req.Wait(context.Background()))
	}

	// Destructions last, concurrently: rank 0's waits for the others to
	// leave.
	derrs := make([]error, len(g.destroys))
	for i, c := range g.destroys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					derrs[i] = errInternal(r)
				}
			}()
			derrs[i] = c.Close()
		}()
	}
	wg.Wait()
	for _, err := range derrs {
		note("occlCommDestroy", nil, err)
	}
	if first != resSuccess {
		// The thread's message is the first failure, not the last.
		setThreadError(firstMsg)
	}
	return first
}
