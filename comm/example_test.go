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
