// Package plain stores a word with a plain store where that is enough:
// for a value written by one side and only loaded by others, whose readers
// need each store to be whole but not ordered with the writer's later
// loads. On amd64 an atomic store is an XCHG, a locked instruction that
// drains the store buffer and waits for the line; a plain MOV is whole
// (for an aligned word) and, under total store order, already ordered
// after every earlier store. Store is written in assembly there, so that
// the compiler can neither drop a store that a later one to the same word
// makes dead in its eyes nor move other stores across it.
//
// With the race detector on (which would report a plain store beside an
// atomic load) and on other architectures, Store is an atomic store.
package plain
