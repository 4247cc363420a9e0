package transport

import (
	"context"
	"errors"
)

// Exchange sends one frame on c and receives one, concurrently, so that
// neither side depends on the connection buffering the other's message
// (both ends of a pair may call it at once). If either fails the other is
// cancelled; the first error is returned.
func Exchange(ctx context.Context, c Conn, sh Header, send []byte, rh Header, recv []byte) error {
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		err := c.Send(ictx, sh, send)
		if err != nil {
			cancel()
		}
		sent <- err
	}()
	err := c.Recv(ictx, rh, recv)
	if err != nil {
		cancel()
	}
	serr := <-sent
	// A receive ended by the failed send's cancellation reports the send's
	// error, the cause.
	if serr != nil && (err == nil || ctx.Err() == nil && errors.Is(err, context.Canceled)) {
		return serr
	}
	return err
}
