package transporttest

import "github.com/occl/occl/transport"

// OneFieldOff returns h with one of its fields changed, chosen by which
// (modulo 8; 0 changes none), bit choosing the bit flipped where a field
// has one flipped: what a frame of another communicator, epoch, root,
// count, step, operation or length carries in place of the one a receiver
// expects. Fuzz targets of a receiver's header checks build their frames
// from it.
func OneFieldOff(h transport.Header, which, bit uint8) transport.Header {
	switch which % 8 {
	case 1:
		h.Comm++
	case 2:
		h.Epoch ^= 1 << (bit % 32)
	case 3:
		h.Root++
	case 4:
		h.Count ^= 1 << (bit % 64)
	case 5:
		h.Step++
	case 6:
		h.Seq--
	case 7:
		h.Len++
	}
	return h
}
