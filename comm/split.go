package comm

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"sort"

	"github.com/occl/occl/algo"
)

// NoColor passed to Split makes the rank take part in no new communicator
// (like NCCL_SPLIT_NOCOLOR); Split returns nil for it.
const NoColor = -1

// Split partitions the communicator, like ncclCommSplit and MPI_Comm_split:
// ranks that pass the same color form a new communicator, ranked by key
// (ties broken by rank in c). Every rank of c must call Split. It returns
// nil on ranks that pass NoColor. Use it to build tensor-, expert- and
// data-parallel groups.
func (c *Communicator) Split(ctx context.Context, color, key int) (*Communicator, error) {
	const name = "Split"
	if color < NoColor || color > 1<<31-1 || key < -1<<31 || key > 1<<31-1 {
		return nil, &OpError{Rank: c.rank, Op: name, Err: invalidf("color %d or key %d out of range", color, key)}
	}
	var child *Communicator
	r := c.postCall(ctx, name, collHeader(algo.OpSplit, 0, 0, 0, 0), func(ctx context.Context, p *opPeers) error {
		var mine [8]byte
		binary.LittleEndian.PutUint32(mine[0:], uint32(int32(color)))
		binary.LittleEndian.PutUint32(mine[4:], uint32(int32(key)))
		all := make([]byte, 8*c.size)
		if err := allGatherBytes(ctx, p, mine[:], all); err != nil {
			return err
		}
		var group []int
		self := -1
		if color != NoColor {
			type member struct{ rank, key int }
			var ms []member
			for r := range c.size {
				if int(int32(binary.LittleEndian.Uint32(all[8*r:]))) == color {
					ms = append(ms, member{r, int(int32(binary.LittleEndian.Uint32(all[8*r+4:])))})
				}
			}
			sort.SliceStable(ms, func(i, j int) bool { return ms[i].key < ms[j].key })
			for i, m := range ms {
				group = append(group, m.rank)
				if m.rank == c.rank {
					self = i
				}
			}
		}
		cc, err := c.linker.split(ctx, p, childID(c.id, p.hdr.Seq, color), group, self)
		if cc != nil {
			cc.inheritObserver(c)
		}
		child = cc
		return err
	})
	if err := wait(r); err != nil {
		if child != nil {
			// Made, but the parent failed meanwhile.
			child.Abort()
		}
		return nil, err
	}
	return child, nil
}

// childID names the communicator of one Split group.
func childID(parent, seq uint64, color int) uint64 {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], parent)
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(color))
	h := sha256.Sum256(b[:])
	return binary.LittleEndian.Uint64(h[:])
}

// allGatherBytes gathers each rank's mine into all (Size() blocks of
// len(mine) bytes) as part of the running operation.
func allGatherBytes(ctx context.Context, p *opPeers, mine, all []byte) error {
	c := p.c
	n := len(mine)
	copy(all[c.rank*n:], mine)
	if c.size == 1 {
		return nil
	}
	offs, lens := c.worker.blocks(c.size, n)
	return algo.AllGatherRing(ctx, p, all, offs, lens, 0)
}
