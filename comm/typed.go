package comm

import "context"

// The functions below are the typed form of the collectives: the element
// type comes from the slices, so mixing types is a compile error. They are
// thin wrappers over the Buffer methods, which the C ABI uses.

// AllReduce is the typed form of (*Communicator).AllReduce.
func AllReduce[T Number](ctx context.Context, c *Communicator, send, recv []T, op Op) error {
	return c.AllReduce(ctx, Slice(send), Slice(recv), op)
}

// Broadcast is the typed form of (*Communicator).Broadcast.
func Broadcast[T Number](ctx context.Context, c *Communicator, send, recv []T, root int) error {
	return c.Broadcast(ctx, Slice(send), Slice(recv), root)
}

// Reduce is the typed form of (*Communicator).Reduce.
func Reduce[T Number](ctx context.Context, c *Communicator, send, recv []T, op Op, root int) error {
	return c.Reduce(ctx, Slice(send), Slice(recv), op, root)
}

// AllGather is the typed form of (*Communicator).AllGather.
func AllGather[T Number](ctx context.Context, c *Communicator, send, recv []T) error {
	return c.AllGather(ctx, Slice(send), Slice(recv))
}

// ReduceScatter is the typed form of (*Communicator).ReduceScatter.
func ReduceScatter[T Number](ctx context.Context, c *Communicator, send, recv []T, op Op) error {
	return c.ReduceScatter(ctx, Slice(send), Slice(recv), op)
}

// AllToAll is the typed form of (*Communicator).AllToAll.
func AllToAll[T Number](ctx context.Context, c *Communicator, send, recv []T) error {
	return c.AllToAll(ctx, Slice(send), Slice(recv))
}

// AllToAllV is the typed form of (*Communicator).AllToAllV.
func AllToAllV[T Number](ctx context.Context, c *Communicator, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int) error {
	return c.AllToAllV(ctx, Slice(send), sendCounts, sendDispls, Slice(recv), recvCounts, recvDispls)
}

// Gather is the typed form of (*Communicator).Gather.
func Gather[T Number](ctx context.Context, c *Communicator, send, recv []T, root int) error {
	return c.Gather(ctx, Slice(send), Slice(recv), root)
}

// Scatter is the typed form of (*Communicator).Scatter.
func Scatter[T Number](ctx context.Context, c *Communicator, send, recv []T, root int) error {
	return c.Scatter(ctx, Slice(send), Slice(recv), root)
}

// Send is the typed form of (*Communicator).Send.
func Send[T Number](ctx context.Context, c *Communicator, buf []T, peer int) error {
	return c.Send(ctx, Slice(buf), peer)
}

// Recv is the typed form of (*Communicator).Recv.
func Recv[T Number](ctx context.Context, c *Communicator, buf []T, peer int) error {
	return c.Recv(ctx, Slice(buf), peer)
}
