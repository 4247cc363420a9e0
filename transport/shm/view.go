package shm

import (
	"context"
	"fmt"

	"github.com/occl/occl/transport"
)

// maxViewAlign is the largest alignment RecvView takes.
const maxViewAlign = 64

// RecvView implements transport.Viewer: a payload in the ring is handed to
// use where it lies, in the pieces that the ring's end and the producer's
// progress cut it into (rounded to whole elements, an element split
// between two pieces handed from a copy of its bytes), and the ring's
// space is freed as the pieces are consumed; a lent payload is copied
// into buf and handed whole.
func (c *Conn) RecvView(ctx context.Context, want transport.Header, buf []byte, align int, use transport.Consumer) error {
	if align <= 0 || align > maxViewAlign || align&(align-1) != 0 {
		return fmt.Errorf("shared ring: view alignment %d is not a power of two up to %d", align, maxViewAlign)
	}
	c.view, c.valign, c.vn = use, align, 0
	err := c.recv(ctx, want, buf)
	c.view = nil
	return c.afterClose(err)
}

// getView hands the next n payload bytes of the in ring to c.view, waiting
// for data as needed, and publishes the head every chunk bytes, as get
// does for a copy.
func (c *Conn) getView(ctx context.Context, n int) error {
	r := &c.in
	for done := 0; done < n; {
		want := uint64(min(n-done, chunk))
		avail, err := c.readable(ctx, want)
		if err != nil {
			return err
		}
		off := c.head & r.mask
		k := min(want, avail, r.cap-off) // up to the ring's end
		c.consume(done, r.data[off:off+k])
		done += int(k)
		if err := c.consumed(k); err != nil {
			return err
		}
	}
	if c.vn > 0 { // the payload is not a whole number of elements
		c.view.Consume(n-c.vn, c.vcarry[:c.vn])
		c.vn = 0
	}
	return nil
}

// consume hands piece, the payload's bytes from off on, to c.view in whole
// elements: an element that an earlier piece began is completed from
// piece's first bytes and handed from vcarry, and the bytes after piece's
// last whole element wait there for the next piece.
func (c *Conn) consume(off int, piece []byte) {
	a := c.valign
	if c.vn > 0 {
		k := copy(c.vcarry[c.vn:a], piece)
		c.vn += k
		piece, off = piece[k:], off+k
		if c.vn < a {
			return
		}
		c.view.Consume(off-a, c.vcarry[:a])
		c.vn = 0
	}
	whole := len(piece) &^ (a - 1)
	if whole > 0 {
		c.view.Consume(off, piece[:whole])
	}
	c.vn = copy(c.vcarry[:], piece[whole:])
}
