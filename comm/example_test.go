package comm_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/occl/occl/comm"
)

// Four ranks in one process sum their vectors. Across processes, the only
// difference is how the communicator is made: comm.Init with a UniqueID
// passed to every process, or comm.InitFromEnv under a launcher.
func Example() {
	comms, err := comm.NewLocal(4)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	results := make([][]float32, 4)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			grad := []float32{float32(c.Rank()), 1}
			if err := comm.AllReduce(ctx, c, grad, grad, comm.Avg); err != nil {
				panic(err)
			}
			results[c.Rank()] = grad
		}()
	}
	wg.Wait()
	fmt.Println(results[0], results[3])
	// Output: [1.5 1] [1.5 1]
}

// Split a communicator into two groups, even and odd ranks, as one would
// build data-parallel groups.
func ExampleCommunicator_Split() {
	comms, _ := comm.NewLocal(4)
	ctx := context.Background()
	sizes := make([]int, 4)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
			if err != nil {
				panic(err)
			}
			defer sub.Close()
			x := []int32{1}
			comm.AllReduce(ctx, sub, x, x, comm.Sum)
			sizes[c.Rank()] = int(x[0])
		}()
	}
	wg.Wait()
	fmt.Println(sizes)
	// Output: [2 2 2 2]
}

// A spare process joins a running job of 3 ranks: the ranks call Grow, the
// spare calls Join with the same id (made on rank 0's host and handed to
// it), and all 4 continue on the grown communicator. Here the ranks and
// the spare are goroutines, over TCP on the loopback.
func ExampleCommunicator_Grow() {
	ctx := context.Background()
	id, _ := comm.NewUniqueIDAt("127.0.0.1:0")
	old := make([]*comm.Communicator, 3)
	var wg sync.WaitGroup
	for r := range old {
		wg.Add(1)
		go func() {
			defer wg.Done()
			old[r], _ = comm.Init(ctx, id, r, len(old))
		}()
	}
	wg.Wait()

	growID, _ := comm.NewUniqueIDAt("127.0.0.1:0")
	sums := make([]int32, 4)
	run := func(g *comm.Communicator) {
		defer g.Close()
		x := []int32{int32(g.Rank())}
		comm.AllReduce(ctx, g, x, x, comm.Sum)
		sums[g.Rank()] = x[0]
	}
	for _, c := range old {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			g, err := c.Grow(ctx, growID, 1)
			if err != nil {
				panic(err)
			}
			run(g)
		}()
	}
	spare, err := comm.Join(ctx, growID)
	if err != nil {
		panic(err)
	}
	fmt.Println("the spare is rank", spare.Rank(), "of", spare.Size())
	run(spare)
	wg.Wait()
	fmt.Println(sums)
	// Output:
	// the spare is rank 3 of 4
	// [6 6 6 6]
}

// Post a ring exchange as one group so the sends and receives progress
// together.
func ExampleGroup() {
	comms, _ := comm.NewLocal(3)
	ctx := context.Background()
	got := make([]int64, 3)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			r, n := c.Rank(), c.Size()
			out, in := []int64{int64(100 + r)}, make([]int64, 1)
			err := c.NewGroup().
				Send(comm.Slice(out), (r+1)%n).
				Recv(comm.Slice(in), (r+n-1)%n).
				Run(ctx)
			if err != nil {
				panic(err)
			}
			got[r] = in[0]
		}()
	}
	wg.Wait()
	fmt.Println(got)
	// Output: [102 100 101]
}
