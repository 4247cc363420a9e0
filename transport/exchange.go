package transport

import "context"

// Exchange sends one frame on c and receives one, concurrently, so that
// neither side depends on the connection buffering the other's message
// (both ends of a pair may call it at once). If the receive fails the send
// is cancelled; the first error is returned.
func Exchange(ctx context.Context, c Conn, sh Header, send []byte, rh Header, recv []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- c.Send(ctx, sh, send) }()
	err := c.Recv(ctx, rh, recv)
	if err != nil {
		cancel()
	}
	if serr := <-sent; err == nil {
		err = serr
	}
	return err
}
