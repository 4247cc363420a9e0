// Package spin holds what a loop that polls shared memory for another
// process's store needs from the processor.
package spin
