package shm

// SetPieceHook makes c call f between the pieces of every cross-memory
// read, with the number of bytes copied so far.
func SetPieceHook(c *Conn, f func(done int)) { c.pieceHook = f }

// PieceSize is the most one process_vm_readv call copies.
const PieceSize = cmaPiece
