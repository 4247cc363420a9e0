package comm

import "fmt"

// placement is who a communicator is and where its ranks are: its id and
// job nonce, this rank, the number of ranks, their hosts, and their ranks
// in the communicator whose topology is the whole fabric's. It is built
// once, by newPlacement, when the communicator is made, and never changes:
// any goroutine may read it without locking.
type placement struct {
	id        uint64
	nonce     [16]byte // the job nonce rank 0 chose
	rank      int
	size      int
	hosts     []int    // host index of every rank
	hostIDs   []string // host identity of every host index
	localRank int      // this rank's index among its host's ranks
	localSize int      // the number of ranks on this rank's host
	// fabricRanks maps this communicator's ranks to those of the one
	// Init or NewLocal made, whose topology is the whole fabric's (nil:
	// this is that communicator).
	fabricRanks []int
}

// newPlacement places rank among the ranks whose host identities are
// hostIDs (one per rank). Hosts are numbered in order of their lowest
// rank.
func newPlacement(id uint64, nonce [16]byte, rank int, hostIDs []string, fabricRanks []int) placement {
	pl := placement{id: id, nonce: nonce, rank: rank, size: len(hostIDs), hosts: make([]int, len(hostIDs)), fabricRanks: fabricRanks}
	index := map[string]int{}
	for r, h := range hostIDs {
		i, ok := index[h]
		if !ok {
			i = len(pl.hostIDs)
			index[h] = i
			pl.hostIDs = append(pl.hostIDs, h)
		}
		pl.hosts[r] = i
	}
	pl.localRank, pl.localSize = localPosition(rank, hostIDs)
	return pl
}

// localPosition returns rank's index among the ranks of its host and their
// number.
func localPosition(rank int, hostIDs []string) (local, n int) {
	for r, h := range hostIDs {
		if h == hostIDs[rank] {
			if r < rank {
				local++
			}
			n++
		}
	}
	return local, n
}

// logID is the communicator id as logs show it.
func (pl *placement) logID() string { return fmt.Sprintf("%016x", pl.id) }

// sameHost says whether rank r is on this rank's host.
func (pl *placement) sameHost(r int) bool { return pl.hosts[r] == pl.hosts[pl.rank] }

// hostIDOf returns the host identity of rank r.
func (pl *placement) hostIDOf(r int) string { return pl.hostIDs[pl.hosts[r]] }

// fabricRank returns rank r's rank in the fabric-wide communicator.
func (pl *placement) fabricRank(r int) int {
	if pl.fabricRanks == nil {
		return r
	}
	return pl.fabricRanks[r]
}

// groupFabricRanks returns the fabric ranks of a Split group, given as
// ranks of this communicator.
func (pl *placement) groupFabricRanks(group []int) []int {
	out := make([]int, len(group))
	for i, r := range group {
		out[i] = pl.fabricRank(r)
	}
	return out
}

// Rank returns this rank, in [0, Size()).
func (c *Communicator) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Communicator) Size() int { return c.size }

// ID returns the communicator id carried in every frame.
func (c *Communicator) ID() uint64 { return c.id }

// JobNonce returns a random value that rank 0 chose when the communicator
// was created and gave every rank: the same on every rank, different for
// every job (and every Init, NewLocal or Split) even when the communicator
// id repeats, as it does for jobs given the same secret. It names this job's
// requests to services that outlive jobs, such as the OCS controller.
func (c *Communicator) JobNonce() [16]byte { return c.nonce }

// LocalRank returns this rank's index among the ranks on its host.
func (c *Communicator) LocalRank() int { return c.localRank }

// LocalSize returns the number of ranks on this rank's host.
func (c *Communicator) LocalSize() int { return c.localSize }

// NumHosts returns the number of distinct hosts.
func (c *Communicator) NumHosts() int { return len(c.hostIDs) }

// Host returns the host index of rank r (hosts are numbered in order of
// their lowest rank), in [0, NumHosts()); -1 if r is not a rank of c.
func (c *Communicator) Host(r int) int {
	if r < 0 || r >= len(c.hosts) {
		return -1
	}
	return c.hosts[r]
}

// HostID returns the identity string of host index h; "" if h is not in
// [0, NumHosts()).
func (c *Communicator) HostID(h int) string {
	if h < 0 || h >= len(c.hostIDs) {
		return ""
	}
	return c.hostIDs[h]
}

// FabricRanks returns, for each rank of c, its rank in the communicator
// that Init or NewLocal made, whose topology describes the whole fabric:
// 0 .. Size()-1 for that communicator, the ranks of its group for one made
// by Split (of Split, ...). A sub-communicator's part of a fabric-wide
// topology t is t.Subset(c.FabricRanks()).
func (c *Communicator) FabricRanks() []int {
	out := make([]int, c.size)
	for r := range out {
		out[r] = c.fabricRank(r)
	}
	return out
}
