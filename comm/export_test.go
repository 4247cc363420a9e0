package comm

import (
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/mem"
)

// PendingPipes returns how many pipes of rewires of c's in-process group
// wait for their second end.
func PendingPipes(c *Communicator) int {
	g := c.linker.(*localLinker).g
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// LeavePendingPipe leaves a pipe of attempt gen between c and peer waiting
// for its second end, as a rank whose plan failed would.
func LeavePendingPipe(c *Communicator, gen, peer int) {
	g := c.linker.(*localLinker).g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending == nil {
		g.pending = map[[3]int][2]transport.Conn{}
	}
	a, b := mem.Pipe(mem.DefaultCapacity)
	g.pending[[3]int{gen, min(c.rank, peer), max(c.rank, peer)}] = [2]transport.Conn{a, b}
}

// RetiredConns returns the connections c's last rewire replaced, still
// open until the next rewire or Close.
func RetiredConns(c *Communicator) []transport.Conn {
	return c.links.retiredConns()
}

// WithLinkFailure returns rw making step ("connect" or "verify") of every
// rank with new links for which f returns an error fail with it: a failed
// connect opens nothing, leaving its peers waiting; a failed verify happens
// after its exchanges, as a wrong answer would.
func WithLinkFailure(rw Rewire, f func(rank int, step string) error) Rewire {
	rw.linkFailure = f
	return rw
}

// DataListenAddr returns the address of the data listener of c, a
// communicator bootstrapped over TCP.
func DataListenAddr(c *Communicator) string {
	return c.linker.(*tcpLinker).ln.Addr().String()
}

// AfterShrinkProposal makes f run whenever a rank of this process has sent
// its proposal in a Shrink's agreement.
func AfterShrinkProposal(f func()) { afterPropose = f }

// AfterShrinkDecision makes f run whenever the agreement of a Shrink
// decided that a rank of this process is a member, before the new
// communicator's bootstrap.
func AfterShrinkDecision(f func()) { afterDecision = f }
